-- Every pre-flight (and other vetting check: gateway, agent query) as a demand signal
-- (SPEC 1.4). Deliberately no foreign key to servers and nothing the scoring reads: demand
-- never feeds a trust score. server_url is null when a name resolved to no known server.
CREATE TABLE preflight_demand (
  id bigserial PRIMARY KEY,
  checked_at timestamptz NOT NULL,
  target text NOT NULL,
  server_url text,
  name text,
  verdict text NOT NULL,
  kind text NOT NULL,
  receipt_id text
);
CREATE INDEX preflight_demand_time_idx ON preflight_demand (checked_at);
CREATE INDEX preflight_demand_target_idx ON preflight_demand (target, checked_at);
