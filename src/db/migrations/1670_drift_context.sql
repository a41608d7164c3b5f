-- What else a server gives the model besides its tools (docs/probes.md "Drift of what else the
-- server says"): its instructions, prompts, resources and resource templates, per baseline.
-- `context`: per part its status (read, not_offered, unavailable), the hash compared (an
-- unavailable part carries the last one read), the count and why it is unavailable; NULL for
-- baselines recorded before this migration, which the next check compares nothing with (so the
-- upgrade reports no drift). `context_changes`: what changed since the previous baseline (NULL
-- when nothing did; dropped by the drift storage job like the tools' change lists).
-- `context_changed`: the parts that changed (instructions, prompts, resources,
-- resource_templates), kept for good like the tool counts (the compliance export lists drifts).
-- `instructions_drift_at`: the time of the server's latest change of instructions as of this
-- baseline (carried from baseline to baseline), which the per-tool gate reads with the latest
-- baseline it already reads (docs/gateway.md "Per-tool decisions").
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS context jsonb;
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS context_changes jsonb;
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS context_changed text[] NOT NULL DEFAULT '{}';
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS instructions_drift_at timestamptz;
-- The entries of each distinct prompt, resource or template list (their keys and hashes, in
-- canonical order), stored once under the list's hash as drift_manifests stores tool lists, and
-- dropped by the drift storage job when no kept baseline names them.
CREATE TABLE IF NOT EXISTS drift_context_lists (
  list_hash text PRIMARY KEY,
  items jsonb NOT NULL,
  used_at timestamptz NOT NULL
);
