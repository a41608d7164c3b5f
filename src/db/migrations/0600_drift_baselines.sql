-- Signed tool-manifest baselines recorded by GET /api/drift, one row per probe. `tools` holds
-- each tool's name with the SHA-256 of its RFC 8785 canonical form and of each part, so the next
-- probe can say what changed; the receipt (kind drift_baseline) signs manifest_hash.
CREATE TABLE drift_baselines (
  baseline_id text PRIMARY KEY,
  server_id bigint NOT NULL REFERENCES servers (id),
  recorded_at timestamptz NOT NULL,
  manifest_hash text NOT NULL,
  tool_count integer NOT NULL,
  tools jsonb NOT NULL,
  previous_baseline_id text,
  drift_detected boolean NOT NULL,
  changes jsonb NOT NULL,
  receipt_id text NOT NULL
);
CREATE INDEX drift_baselines_server_time_idx ON drift_baselines (server_id, recorded_at);
