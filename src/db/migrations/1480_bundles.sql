-- Offline verdict bundles (docs/bundles.md). Each distinct bundle state (one filter set, one
-- content) is remembered for BUNDLE_DELTA_RETENTION_HOURS so `GET /v1/bundle?since=<bundle_id>`
-- can answer a signed delta against it. `digests` is gzip(JSON [[url, entry digest], ...]): what
-- the delta needs (which entries changed, which URLs left) without keeping the entries themselves.
CREATE TABLE IF NOT EXISTS bundle_states (
  bundle_id text PRIMARY KEY,
  filter_key text NOT NULL,
  first_issued_at timestamptz NOT NULL,
  last_issued_at timestamptz NOT NULL,
  server_count integer NOT NULL,
  digests bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS bundle_states_last_issued_idx ON bundle_states (last_issued_at);
-- The bundle reads the latest baseline of every server at once.
CREATE INDEX IF NOT EXISTS drift_baselines_server_latest_idx ON drift_baselines (server_id, recorded_at DESC, seq DESC);
