-- Per-tool runtime evidence for the gateway's per-tool decisions (docs/gateway.md "Per-tool
-- decisions"): the same decayed per-source accumulators as trust_evidence, keyed also by the
-- tool_name reports carry, so a tool's own score comes from the same source-robust model as the
-- server's. Written in the ingest statement beside trust_evidence for every report that names a
-- tool; reports without tool_name add nothing here. Reports received before this table existed
-- carry no source in the raw table and are not backfilled.
CREATE TABLE IF NOT EXISTS tool_evidence (
  server_id bigint NOT NULL REFERENCES servers (id),
  tool_name text NOT NULL,
  source text NOT NULL,
  weight double precision NOT NULL,
  successes double precision NOT NULL,
  latency_sum double precision NOT NULL,
  reports bigint NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (server_id, tool_name, source)
);
