-- Pre-flight demand per target (issue 23, docs/performance.md "100,000 servers"): the coverage
-- report and the all-time window of /api/demand read these sums instead of aggregating every
-- demand row per request, so their cost follows the number of distinct targets, not of checks.
-- Kept by a statement trigger on preflight_demand in the same transaction as the rows it
-- counts (every writer: the pre-flight group commit, the demand buffer), so it never disagrees
-- with the table. One row per target and server_url ('' when the target named no tracked
-- server), the grouping the aggregates of src/store/demand.ts need, and shard: the writing
-- connection's backend pid modulo 8, so concurrent pre-flight batches (the group commit runs
-- up to three at once on PostgreSQL, all checking the same popular targets) add to different
-- rows instead of queueing on one row lock each; the reads sum the shards.
CREATE TABLE IF NOT EXISTS preflight_demand_targets (
  target text NOT NULL,
  server_url text NOT NULL,
  name text,
  checks int8 NOT NULL,
  pass int8 NOT NULL,
  uncertain int8 NOT NULL,
  fail int8 NOT NULL,
  unrated int8 NOT NULL,
  last_checked_at timestamptz NOT NULL,
  last_id int8 NOT NULL,
  last_verdict text NOT NULL,
  shard int2 NOT NULL,
  PRIMARY KEY (target, server_url, shard)
);
CREATE OR REPLACE FUNCTION preflight_demand_targets_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Sorted by key so concurrent statements lock shared rows in one order (no deadlock).
  INSERT INTO preflight_demand_targets AS t (target, server_url, shard, name, checks, pass, uncertain, fail, unrated, last_checked_at, last_id, last_verdict)
  SELECT n.target, coalesce(n.server_url, ''), (pg_backend_pid() % 8)::int2, max(n.name), count(*),
         count(*) FILTER (WHERE n.verdict = 'PASS'), count(*) FILTER (WHERE n.verdict = 'UNCERTAIN'),
         count(*) FILTER (WHERE n.verdict = 'FAIL'), count(*) FILTER (WHERE n.verdict = 'UNRATED'),
         max(n.checked_at), (array_agg(n.id ORDER BY n.checked_at DESC, n.id DESC))[1], (array_agg(n.verdict ORDER BY n.checked_at DESC, n.id DESC))[1]
    FROM new_rows n GROUP BY n.target, coalesce(n.server_url, '') ORDER BY 1, 2
  ON CONFLICT (target, server_url, shard) DO UPDATE SET
    name = greatest(t.name, EXCLUDED.name),
    checks = t.checks + EXCLUDED.checks,
    pass = t.pass + EXCLUDED.pass,
    uncertain = t.uncertain + EXCLUDED.uncertain,
    fail = t.fail + EXCLUDED.fail,
    unrated = t.unrated + EXCLUDED.unrated,
    last_verdict = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (t.last_checked_at, t.last_id) THEN EXCLUDED.last_verdict ELSE t.last_verdict END,
    last_id = CASE WHEN (EXCLUDED.last_checked_at, EXCLUDED.last_id) > (t.last_checked_at, t.last_id) THEN EXCLUDED.last_id ELSE t.last_id END,
    last_checked_at = greatest(t.last_checked_at, EXCLUDED.last_checked_at);
  RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS preflight_demand_targets_trg ON preflight_demand;
CREATE TRIGGER preflight_demand_targets_trg AFTER INSERT ON preflight_demand
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION preflight_demand_targets_add();
-- What was counted before the trigger existed (the migration holds the lock on the table's
-- writers through its transaction: no row is counted twice or missed).
LOCK TABLE preflight_demand IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM preflight_demand_targets;
INSERT INTO preflight_demand_targets (target, server_url, shard, name, checks, pass, uncertain, fail, unrated, last_checked_at, last_id, last_verdict)
SELECT d.target, coalesce(d.server_url, ''), 0, max(d.name), count(*),
       count(*) FILTER (WHERE d.verdict = 'PASS'), count(*) FILTER (WHERE d.verdict = 'UNCERTAIN'),
       count(*) FILTER (WHERE d.verdict = 'FAIL'), count(*) FILTER (WHERE d.verdict = 'UNRATED'),
       max(d.checked_at), (array_agg(d.id ORDER BY d.checked_at DESC, d.id DESC))[1], (array_agg(d.verdict ORDER BY d.checked_at DESC, d.id DESC))[1]
  FROM preflight_demand d GROUP BY d.target, coalesce(d.server_url, '');
