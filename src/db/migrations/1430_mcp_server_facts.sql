-- What the MCP probe (drift, active observation) learned about a server at its latest successful
-- probe (docs/probes.md "The MCP probe", "Server Cards"): the protocol revision it spoke, over which
-- transport, what it called itself, and what its Server Card claims against that. One row per
-- server, replaced by each probe. card_differences: null when no card was found, [] when the card
-- matches, otherwise what differs (field, claimed, observed, detail). A card never moves a score.
CREATE TABLE IF NOT EXISTS mcp_server_facts (
  server_id bigint PRIMARY KEY REFERENCES servers (id),
  probed_at timestamptz NOT NULL,
  protocol_version text NOT NULL,
  era text NOT NULL,
  transport text NOT NULL,
  server_name text,
  server_version text,
  supported_versions jsonb,
  card_url text,
  card_claims jsonb,
  card_fetched_at timestamptz,
  card_differences jsonb,
  card_checked_at timestamptz
);
