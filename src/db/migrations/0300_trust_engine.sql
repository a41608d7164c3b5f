-- Trust engine rollups (docs/scoring.md "Storage"). Maintained in the same transaction as each
-- accepted report, so reads never scan raw telemetry.

-- Plain all-time totals per server: metrics, p95 and stats read one row per server.
-- hist: counts per latency bin (src/domain/latency-histogram.ts).
CREATE TABLE server_totals (
  server_id bigint PRIMARY KEY REFERENCES servers (id),
  n bigint NOT NULL,
  successes bigint NOT NULL,
  latency_sum double precision NOT NULL,
  n_5xx bigint NOT NULL,
  hist bigint[] NOT NULL,
  first_at timestamptz NOT NULL,
  last_at timestamptz NOT NULL
);

-- Hourly rollups per server and report source (a keyed hash, never an address).
CREATE TABLE telemetry_hourly (
  server_id bigint NOT NULL REFERENCES servers (id),
  bucket timestamptz NOT NULL,
  source text NOT NULL,
  n bigint NOT NULL,
  successes bigint NOT NULL,
  latency_sum double precision NOT NULL,
  n_5xx bigint NOT NULL,
  hist bigint[] NOT NULL,
  PRIMARY KEY (server_id, bucket, source)
);

-- Exponentially decayed evidence per server and source, valid at updated_at (half-life in
-- src/domain/scoring.ts). A score reads one row per source, however many reports exist.
CREATE TABLE trust_evidence (
  server_id bigint NOT NULL REFERENCES servers (id),
  source text NOT NULL,
  weight double precision NOT NULL,
  successes double precision NOT NULL,
  latency_sum double precision NOT NULL,
  reports bigint NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (server_id, source)
);

-- Current score per server (a cache of the last computation) and hourly history for deltas.
CREATE TABLE server_scores (
  server_id bigint PRIMARY KEY REFERENCES servers (id),
  trust_score double precision NOT NULL,
  verdict text NOT NULL,
  anomaly_flags text[] NOT NULL,
  evidence_reports bigint NOT NULL,
  computed_at timestamptz NOT NULL
);
CREATE INDEX server_scores_rank_idx ON server_scores (trust_score DESC);

CREATE TABLE score_snapshots (
  server_id bigint NOT NULL REFERENCES servers (id),
  bucket timestamptz NOT NULL,
  trust_score double precision NOT NULL,
  verdict text NOT NULL,
  computed_at timestamptz NOT NULL,
  PRIMARY KEY (server_id, bucket)
);

-- Secrets for the keyed hash of client addresses; one per UTC day, deleted after two days so
-- old hashes cannot be linked to addresses or to each other.
CREATE TABLE source_secrets (
  day date PRIMARY KEY,
  secret bytea NOT NULL
);
