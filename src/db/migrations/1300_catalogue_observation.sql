-- Catalogue import (docs/observation.md): what the MCP Registry says about a server. All
-- nullable: servers tracked through telemetry alone have none of it.
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_name text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS title text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS description text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS repository_url text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_version text;
-- The remote's transport as the registry lists it: streamable-http or sse (null: streamable-http).
ALTER TABLE servers ADD COLUMN IF NOT EXISTS transport text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS catalogued_at timestamptz;
CREATE INDEX IF NOT EXISTS servers_registry_name_idx ON servers (lower(registry_name));

-- Active observation: when each tracked server is next due for a probe. Instances claim due rows
-- with FOR UPDATE SKIP LOCKED and move next_due_at one interval ahead in the same statement, so
-- each server is probed once per interval however many instances run.
CREATE TABLE IF NOT EXISTS observation_schedule (
  server_id bigint PRIMARY KEY REFERENCES servers (id),
  next_due_at timestamptz NOT NULL,
  claimed_by text,
  claimed_at timestamptz,
  last_probe_at timestamptz,
  last_outcome text,
  last_detail text,
  last_latency_ms double precision,
  probes bigint NOT NULL DEFAULT 0,
  consecutive_failures integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS observation_schedule_due_idx ON observation_schedule (next_due_at);

-- The global probe budget (OBSERVE_RATE_PER_MINUTE): probes started per UTC minute by all
-- instances together. A claim locks its minute's row, so concurrent claimers never overspend.
CREATE TABLE IF NOT EXISTS observation_budget (
  minute timestamptz PRIMARY KEY,
  used integer NOT NULL
);
