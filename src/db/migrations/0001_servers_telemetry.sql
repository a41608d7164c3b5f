-- Servers are identified by their canonical URL (see src/domain/server-identity.ts).
CREATE TABLE servers (
  id bigserial PRIMARY KEY,
  url text NOT NULL UNIQUE,
  name text NOT NULL,
  slug text NOT NULL,
  category text NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX servers_slug_idx ON servers (slug);
CREATE INDEX servers_name_idx ON servers (lower(name));

-- Accepted telemetry: exactly the five fields of SPEC 2.2, plus when it arrived.
CREATE TABLE telemetry (
  id bigserial PRIMARY KEY,
  server_id bigint NOT NULL REFERENCES servers (id),
  received_at timestamptz NOT NULL DEFAULT now(),
  success boolean NOT NULL,
  latency_ms double precision NOT NULL,
  tool_name text,
  http_status integer
);
CREATE INDEX telemetry_server_time_idx ON telemetry (server_id, received_at);
