-- Issue 22: the acknowledged ingest write is the raw append; the rollups (server_totals,
-- telemetry_hourly, trust_evidence) are folded from committed raw rows by one aggregator at a
-- time (src/store/rollup-aggregator.ts, docs/performance.md "Ingestion").
--
-- telemetry.xid: the 64-bit id of the inserting transaction (pg_current_xact_id()), written
-- explicitly by the raw append. Raw ids alone cannot carry a watermark: two concurrent appends
-- take ids 10 and 11 and may commit 11 first, so "everything up to 11 is folded" would skip 10.
-- Transaction ids can: a PostgreSQL snapshot says exactly which ones were still running, so
-- "every transaction below xmax and not in xip has finished" is a fact, and its rows are final.
-- Rows written before this migration (and by any older version still running during a rolling
-- deploy, which wrote the rollups itself) have xid NULL and are never folded again.
-- telemetry.source: the report source key (a hash, never an address), needed by the hourly and
-- evidence rollups, which are per source.
ALTER TABLE telemetry ADD COLUMN xid int8;
ALTER TABLE telemetry ADD COLUMN source text;
CREATE INDEX telemetry_xid_idx ON telemetry (xid);

-- One row: every raw row whose xid < horizon and not in pending has been folded, exactly once.
-- pending: transactions that were still running below the horizon when it was set.
CREATE TABLE rollup_watermark (
  name text PRIMARY KEY,
  horizon int8 NOT NULL,
  pending int8[] NOT NULL DEFAULT '{}',
  max_raw_id int8 NOT NULL DEFAULT 0,
  folded_rows int8 NOT NULL DEFAULT 0,
  folded_at timestamptz
);
INSERT INTO rollup_watermark (name, horizon, pending)
  SELECT 'rollups', pg_snapshot_xmax(s)::text::int8, '{}' FROM (SELECT pg_current_snapshot() AS s) q;
