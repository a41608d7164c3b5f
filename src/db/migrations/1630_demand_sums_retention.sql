-- DEMAND_RETENTION_DAYS (src/services/demand-retention.ts): demand rows older than the retention
-- are deleted, and so are the per-target sums (1560) of targets that named no tracked server and
-- were not checked within it; what those sums counted moves into preflight_demand_retired, one
-- row, so every all-time figure (/api/demand's alltime window, the coverage report's checks per
-- category, /api/stats' market figures) keeps counting it. Before, both tables only grew: one
-- row per claim per second (a gateway: one per upstream per second) and one per distinct target
-- text (any name a client sends, up to 2,048 characters), and the market figures read every
-- demand row once a minute.
--
-- The all-time figures that read raw rows (checks per kind, tracked servers vetted) now read the
-- sums, which therefore also count the gateway's and agent queries' checks. Receipts issued are
-- counted as they are stored (receipt_counts, below).
ALTER TABLE preflight_demand_targets ADD COLUMN IF NOT EXISTS gateway int8 NOT NULL DEFAULT 0;
ALTER TABLE preflight_demand_targets ADD COLUMN IF NOT EXISTS agent_query int8 NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS preflight_demand_retired (
  id int2 PRIMARY KEY CHECK (id = 1),
  -- Distinct targets retired (a target retired and checked again later counts again).
  targets int8 NOT NULL,
  checks int8 NOT NULL,
  pass int8 NOT NULL,
  uncertain int8 NOT NULL,
  fail int8 NOT NULL,
  unrated int8 NOT NULL,
  gateway int8 NOT NULL,
  agent_query int8 NOT NULL
);

-- Receipts issued, counted as they are stored: /api/stats' receipts_issued read count(*) of the
-- receipts table once a minute per instance (one receipt per claim per second: a gateway over 200
-- upstreams stores 17 million a day), and fell whenever RECEIPT_RETENTION_DAYS deleted. Kept by a
-- statement trigger in the same transaction as the receipts it counts, in eight shards by the
-- writing backend (concurrent receipt batches add to different rows); reads sum the shards.
CREATE TABLE IF NOT EXISTS receipt_counts (
  shard int2 PRIMARY KEY,
  issued int8 NOT NULL
);
CREATE OR REPLACE FUNCTION receipt_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO receipt_counts AS c (shard, issued)
  SELECT (pg_backend_pid() % 8)::int2, count(*) FROM new_rows HAVING count(*) > 0
  ON CONFLICT (shard) DO UPDATE SET issued = c.issued + EXCLUDED.issued;
  RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS receipt_counts_trg ON receipts;
CREATE TRIGGER receipt_counts_trg AFTER INSERT ON receipts
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION receipt_counts_add();
-- What is stored now (receipts a retention deleted before this migration are not known any more).
LOCK TABLE receipts IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM receipt_counts;
INSERT INTO receipt_counts (shard, issued) SELECT 0, count(*) FROM receipts;

-- Pre-flight demand per target and UTC hour (preflight_demand_hourly): /api/demand's 24h, 7d
-- and 30d windows, the coverage report and /api/stats' checks of the last 24 hours read these
-- sums instead of every demand row in the window. A gateway writes a demand row per upstream per
-- second (one claim's calls are one row), 17 million a day over 200 upstreams: a 30-day window
-- aggregated half a billion rows per computation, and a paged window request (?window=30d)
-- computed it per request. The sums grow with distinct targets per hour, not with checks. Kept
-- by the statement trigger of migration 1560 (below: adding to the per-target sums and to these)
-- in the same transaction as the rows it counts, sharded by the writing backend like the
-- per-target sums. A window starts at the UTC hour its start falls in (docs/pages.md).
CREATE TABLE IF NOT EXISTS preflight_demand_hourly (
  bucket timestamptz NOT NULL,
  target text NOT NULL,
  server_url text NOT NULL,
  shard int2 NOT NULL,
  name text,
  checks int8 NOT NULL,
  pass int8 NOT NULL,
  uncertain int8 NOT NULL,
  fail int8 NOT NULL,
  unrated int8 NOT NULL,
  last_checked_at timestamptz NOT NULL,
  last_id int8 NOT NULL,
  last_verdict text NOT NULL,
  PRIMARY KEY (bucket, target, server_url, shard)
);

CREATE OR REPLACE FUNCTION preflight_demand_targets_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Sorted by key so concurrent statements lock shared rows in one order (no deadlock).
  INSERT INTO preflight_demand_targets AS t (target, server_url, shard, name, checks, pass, uncertain, fail, unrated, gateway, agent_query, last_checked_at, last_id, last_verdict)
  SELECT n.target, coalesce(n.server_url, ''), (pg_backend_pid() % 8)::int2, max(n.name), sum(n.checks),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'PASS'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNCERTAIN'), 0),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'FAIL'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNRATED'), 0),
         coalesce(sum(n.checks) FILTER (WHERE n.kind = 'gateway'), 0), coalesce(sum(n.checks) FILTER (WHERE n.kind = 'agent_query'), 0),
         max(n.checked_at), (array_agg(n.id ORDER BY n.checked_at DESC, n.id DESC))[1], (array_agg(n.verdict ORDER BY n.checked_at DESC, n.id DESC))[1]
    FROM new_rows n GROUP BY n.target, coalesce(n.server_url, '') ORDER BY 1, 2
  ON CONFLICT (target, server_url, shard) DO UPDATE SET
    name = greatest(t.name, EXCLUDED.name),
    checks = t.checks + EXCLUDED.checks,
    pass = t.pass + EXCLUDED.pass,
    uncertain = t.uncertain + EXCLUDED.uncertain,
    fail = t.fail + EXCLUDED.fail,
    unrated = t.unrated + EXCLUDED.unrated,
    gateway = t.gateway + EXCLUDED.gateway,
    agent_query = t.agent_query + EXCLUDED.agent_query,
    last_verdict = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (t.last_checked_at, t.last_id) THEN EXCLUDED.last_verdict ELSE t.last_verdict END,
    last_id = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (t.last_checked_at, t.last_id) THEN EXCLUDED.last_id ELSE t.last_id END,
    last_checked_at = greatest(t.last_checked_at, EXCLUDED.last_checked_at);
  INSERT INTO preflight_demand_hourly AS h (bucket, target, server_url, shard, name, checks, pass, uncertain, fail, unrated, last_checked_at, last_id, last_verdict)
  SELECT date_trunc('hour', n.checked_at, 'UTC'), n.target, coalesce(n.server_url, ''), (pg_backend_pid() % 8)::int2, max(n.name), sum(n.checks),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'PASS'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNCERTAIN'), 0),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'FAIL'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNRATED'), 0),
         max(n.checked_at), (array_agg(n.id ORDER BY n.checked_at DESC, n.id DESC))[1], (array_agg(n.verdict ORDER BY n.checked_at DESC, n.id DESC))[1]
    FROM new_rows n GROUP BY 1, n.target, coalesce(n.server_url, '') ORDER BY 1, 2, 3
  ON CONFLICT (bucket, target, server_url, shard) DO UPDATE SET
    name = greatest(h.name, EXCLUDED.name),
    checks = h.checks + EXCLUDED.checks,
    pass = h.pass + EXCLUDED.pass,
    uncertain = h.uncertain + EXCLUDED.uncertain,
    fail = h.fail + EXCLUDED.fail,
    unrated = h.unrated + EXCLUDED.unrated,
    last_verdict = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (h.last_checked_at, h.last_id) THEN EXCLUDED.last_verdict ELSE h.last_verdict END,
    last_id = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (h.last_checked_at, h.last_id) THEN EXCLUDED.last_id ELSE h.last_id END,
    last_checked_at = greatest(h.last_checked_at, EXCLUDED.last_checked_at);
  RETURN NULL;
END
$$;

-- The per-kind sums of what was counted before (the migration holds the lock on the table's
-- writers through its transaction: no row is counted twice or missed). The sums' shard is the
-- writer's, not the row's: the kinds are added to one shard row of each (target, server_url).
LOCK TABLE preflight_demand IN SHARE ROW EXCLUSIVE MODE;
UPDATE preflight_demand_targets SET gateway = 0, agent_query = 0;
UPDATE preflight_demand_targets t SET gateway = k.gateway, agent_query = k.agent_query
  FROM (SELECT d.target, coalesce(d.server_url, '') AS server_url,
               coalesce(sum(d.checks) FILTER (WHERE d.kind = 'gateway'), 0) AS gateway,
               coalesce(sum(d.checks) FILTER (WHERE d.kind = 'agent_query'), 0) AS agent_query
          FROM preflight_demand d GROUP BY 1, 2) k,
       LATERAL (SELECT min(shard) AS shard FROM preflight_demand_targets x WHERE x.target = k.target AND x.server_url = k.server_url) first
 WHERE t.target = k.target AND t.server_url = k.server_url AND t.shard = first.shard;
DELETE FROM preflight_demand_hourly;
INSERT INTO preflight_demand_hourly (bucket, target, server_url, shard, name, checks, pass, uncertain, fail, unrated, last_checked_at, last_id, last_verdict)
SELECT date_trunc('hour', d.checked_at, 'UTC'), d.target, coalesce(d.server_url, ''), 0, max(d.name), sum(d.checks),
       coalesce(sum(d.checks) FILTER (WHERE d.verdict = 'PASS'), 0), coalesce(sum(d.checks) FILTER (WHERE d.verdict = 'UNCERTAIN'), 0),
       coalesce(sum(d.checks) FILTER (WHERE d.verdict = 'FAIL'), 0), coalesce(sum(d.checks) FILTER (WHERE d.verdict = 'UNRATED'), 0),
       max(d.checked_at), (array_agg(d.id ORDER BY d.checked_at DESC, d.id DESC))[1], (array_agg(d.verdict ORDER BY d.checked_at DESC, d.id DESC))[1]
  FROM preflight_demand d GROUP BY 1, d.target, coalesce(d.server_url, '');
