-- The bound on new servers per report source (NEW_SERVERS_PER_SOURCE_PER_HOUR, issue 17 finding
-- 9): one row per server a report created, keyed by the source family (a keyed hash of the
-- reporter's network, or the family of its API key; never an address). Rows older than the
-- one-hour window are deleted.
CREATE TABLE server_creations (
  id bigserial PRIMARY KEY,
  source_key text NOT NULL,
  at timestamptz NOT NULL
);
CREATE INDEX server_creations_key_at_idx ON server_creations (source_key, at);
CREATE INDEX server_creations_at_idx ON server_creations (at);
