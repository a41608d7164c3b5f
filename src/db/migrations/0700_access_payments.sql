-- Anonymous API keys (POST /agent/auth). Only the SHA-256 of the key is kept; the key itself is
-- shown once. trial_used is spent by one conditional UPDATE, so no key exceeds trial_limit.
CREATE TABLE api_keys (
  id bigserial PRIMARY KEY,
  key_hash text NOT NULL UNIQUE,
  scopes text[] NOT NULL,
  trial_limit integer NOT NULL,
  trial_used integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL,
  last_used_at timestamptz,
  CHECK (trial_used >= 0 AND trial_used <= trial_limit)
);

-- Secrets of the keyed client-address hash, one per UTC day, shared by every instance. Old ones
-- are deleted, so an expired hash can no longer be linked to an address.
CREATE TABLE address_hash_secrets (
  day date PRIMARY KEY,
  secret text NOT NULL
);

-- One row per registration, keyed by HMAC(secret of the day, client address); rows older than
-- the one-hour window are deleted. Never the raw address.
CREATE TABLE registration_events (
  id bigserial PRIMARY KEY,
  address_hash text NOT NULL,
  at timestamptz NOT NULL
);
CREATE INDEX registration_events_hash_at_idx ON registration_events (address_hash, at);
CREATE INDEX registration_events_at_idx ON registration_events (at);

-- Every on-chain payment honoured for a paid verdict. The primary key makes each transaction
-- hash usable once across all instances.
CREATE TABLE payments (
  tx_hash text PRIMARY KEY,
  payer text,
  amount_units numeric NOT NULL,
  block_number bigint,
  server_url text NOT NULL,
  receipt_id text,
  paid_at timestamptz NOT NULL
);
