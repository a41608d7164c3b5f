-- Ed25519 signing keys shared by every instance. private_jwk is null for a key supplied through
-- SIGNING_KEY_JWK (only its public half is kept, so the JWKS can publish it after rotation).
CREATE TABLE signing_keys (
  kid text PRIMARY KEY,
  public_jwk jsonb NOT NULL,
  private_jwk jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  retired_at timestamptz,
  active boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (active) WHERE active;

-- Every signed receipt we issue, resolvable at /v1/receipt/{receipt_id}.
CREATE TABLE receipts (
  receipt_id text PRIMARY KEY,
  kind text NOT NULL,
  sub text NOT NULL,
  issued_at timestamptz NOT NULL,
  kid text NOT NULL,
  claim jsonb NOT NULL,
  jws text NOT NULL
);
CREATE INDEX receipts_sub_idx ON receipts (sub, issued_at);
CREATE INDEX receipts_kind_time_idx ON receipts (kind, issued_at);
