-- Raw telemetry partitioned by month of received_at (UTC), so retention drops whole partitions
-- instead of deleting rows (docs/performance.md "Telemetry partitions and retention").
-- Partitions are named telemetry_pYYYY_MM and cover [first of the month, first of the next) in
-- UTC; src/store/telemetry-partitions.ts creates upcoming ones and drops expired ones. A DEFAULT
-- partition takes any row no monthly partition covers, so no insert is ever refused.
-- Scores never read this table (they read server_totals, telemetry_hourly, trust_evidence).
ALTER TABLE telemetry RENAME TO telemetry_unpartitioned;
ALTER INDEX telemetry_pkey RENAME TO telemetry_unpartitioned_pkey;
ALTER INDEX telemetry_server_time_idx RENAME TO telemetry_unpartitioned_server_time_idx;
ALTER SEQUENCE telemetry_id_seq OWNED BY NONE;

-- The primary key of a partitioned table must contain the partition key.
CREATE TABLE telemetry (
  id bigint NOT NULL DEFAULT nextval('telemetry_id_seq'),
  server_id bigint NOT NULL REFERENCES servers (id),
  received_at timestamptz NOT NULL DEFAULT now(),
  success boolean NOT NULL,
  latency_ms double precision NOT NULL,
  tool_name text,
  http_status integer,
  PRIMARY KEY (id, received_at)
) PARTITION BY RANGE (received_at);
ALTER SEQUENCE telemetry_id_seq OWNED BY telemetry.id;
CREATE INDEX telemetry_server_time_idx ON telemetry (server_id, received_at);
CREATE TABLE telemetry_default PARTITION OF telemetry DEFAULT;

-- One partition per month holding existing rows (at most 120 months back; older rows go to the
-- default partition), and for this month and the next two.
DO $$
DECLARE
  -- Month arithmetic on UTC wall-clock timestamps, so bounds are UTC midnights whatever the session time zone.
  this_month timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
  oldest timestamp;
  m timestamp;
BEGIN
  SELECT date_trunc('month', min(received_at) AT TIME ZONE 'UTC') INTO oldest FROM telemetry_unpartitioned;
  m := least(greatest(coalesce(oldest, this_month), this_month - interval '120 months'), this_month);
  WHILE m <= this_month + interval '2 months' LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF telemetry FOR VALUES FROM (%L) TO (%L)',
      'telemetry_p' || to_char(m, 'YYYY_MM'), m AT TIME ZONE 'UTC', (m + interval '1 month') AT TIME ZONE 'UTC');
    m := m + interval '1 month';
  END LOOP;
END
$$;

INSERT INTO telemetry (id, server_id, received_at, success, latency_ms, tool_name, http_status)
  SELECT id, server_id, received_at, success, latency_ms, tool_name, http_status FROM telemetry_unpartitioned;
DROP TABLE telemetry_unpartitioned;
