-- Demand rows per claim, not per call (issue 22): the demand buffer writes identical checks
-- counted between two writes (same receipt, target, verdict and kind: the calls that share one
-- claim's receipt within RECEIPT_SHARE_MS) as one row with their number in `checks`, dated by the
-- last of them. Every reader counts sum(checks); rows written before count 1 each.
ALTER TABLE preflight_demand ADD COLUMN IF NOT EXISTS checks int4 NOT NULL DEFAULT 1;
ALTER TABLE preflight_demand DROP CONSTRAINT IF EXISTS preflight_demand_checks_positive;
ALTER TABLE preflight_demand ADD CONSTRAINT preflight_demand_checks_positive CHECK (checks > 0);
-- The per-target sums (migration 1560) add the checks of each new row, not one per row.
CREATE OR REPLACE FUNCTION preflight_demand_targets_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Sorted by key so concurrent statements lock shared rows in one order (no deadlock).
  INSERT INTO preflight_demand_targets AS t (target, server_url, shard, name, checks, pass, uncertain, fail, unrated, last_checked_at, last_id, last_verdict)
  SELECT n.target, coalesce(n.server_url, ''), (pg_backend_pid() % 8)::int2, max(n.name), sum(n.checks),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'PASS'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNCERTAIN'), 0),
         coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'FAIL'), 0), coalesce(sum(n.checks) FILTER (WHERE n.verdict = 'UNRATED'), 0),
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
