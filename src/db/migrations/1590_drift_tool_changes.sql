-- One row per tool a detected drift changed or added, so the gate's per-tool check finds a
-- tool's newest drift by index. Before, each decision read the change lists of its server's
-- newest 1,000 drifts (a server's own lists, up to 2,000 names each), and a tool's drift hidden
-- behind 1,000 later drifts of other tools was not seen. `id` orders drifts recorded at the same
-- instant as they were recorded (drift_baselines.seq). Names longer than the probe now takes (512
-- characters, src/probes/mcp-manifest.ts) cannot be indexed and are left out.
CREATE TABLE IF NOT EXISTS drift_tool_changes (
  id bigserial PRIMARY KEY,
  server_id bigint NOT NULL REFERENCES servers (id),
  tool_name text NOT NULL,
  recorded_at timestamptz NOT NULL,
  baseline_id text NOT NULL,
  change text NOT NULL CHECK (change IN ('changed', 'added')),
  parts jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS drift_tool_changes_lookup_idx ON drift_tool_changes (server_id, tool_name, recorded_at DESC, id DESC);
INSERT INTO drift_tool_changes (server_id, tool_name, recorded_at, baseline_id, change, parts)
SELECT server_id, tool_name, recorded_at, baseline_id, change, parts FROM (
  SELECT d.server_id, c.v->>'name' AS tool_name, d.recorded_at, d.baseline_id, 'changed' AS change, c.v->'changes' AS parts, d.seq, c.o
    FROM drift_baselines d, jsonb_array_elements(d.changes->'changed') WITH ORDINALITY AS c(v, o) WHERE d.drift_detected AND length(c.v->>'name') <= 512
  UNION ALL
  SELECT d.server_id, a.v, d.recorded_at, d.baseline_id, 'added', '[]'::jsonb, d.seq, 100000 + a.o
    FROM drift_baselines d, jsonb_array_elements_text(d.changes->'added') WITH ORDINALITY AS a(v, o) WHERE d.drift_detected AND length(a.v) <= 512
) x ORDER BY seq, o;
