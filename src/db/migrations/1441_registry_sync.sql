-- MCP Registry sync (docs/observation.md "Registry sync"): what the registry says about each
-- catalogued server's listing, and where each registry's incremental sync stands.
-- registry_status: active, deprecated or deleted (the registry's _meta official status); null for
-- servers no registry import listed. A deleted server keeps its evidence but is not probed.
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_status text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_status_message text;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_status_changed_at timestamptz;
ALTER TABLE servers ADD COLUMN IF NOT EXISTS registry_updated_at timestamptz;
UPDATE servers SET registry_status = 'active' WHERE registry_name IS NOT NULL AND registry_status IS NULL;

-- One row per registry list URL (REGISTRY_SYNC_URL). high_water is the greatest entry updatedAt a
-- complete sync has seen, as the registry wrote it (microseconds kept): the next sync asks the
-- registry only for entries updated since then.
CREATE TABLE IF NOT EXISTS registry_sync_state (
  source text PRIMARY KEY,
  high_water text,
  last_run_at timestamptz,
  last_ok_at timestamptz,
  last_error text,
  last_summary jsonb
);
