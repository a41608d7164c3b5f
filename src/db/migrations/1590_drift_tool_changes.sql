-- Each tool's newest drift on its server, so the gate's per-tool check finds it by key. Before,
-- each decision read the change lists of its server's newest 1,000 drifts (a server's own lists,
-- up to 2,000 names each), and a tool's drift hidden behind 1,000 later drifts of other tools was
-- not seen. One row per (server, tool) the server lists now: a drift that changes or adds a tool
-- replaces its row, one that removes the tool deletes it, so the table holds at most a server's
-- current tools whatever the server does. Filled from the baselines recorded before it, in order.
-- Names longer than the probe now takes (512 characters, src/probes/mcp-manifest.ts) cannot be
-- indexed and are left out.
CREATE TABLE IF NOT EXISTS drift_tool_changes (
  server_id bigint NOT NULL REFERENCES servers (id),
  tool_name text NOT NULL,
  recorded_at timestamptz NOT NULL,
  baseline_id text NOT NULL,
  change text NOT NULL CHECK (change IN ('changed', 'added')),
  parts jsonb NOT NULL,
  PRIMARY KEY (server_id, tool_name)
);
INSERT INTO drift_tool_changes (server_id, tool_name, recorded_at, baseline_id, change, parts)
SELECT DISTINCT ON (server_id, tool_name) server_id, tool_name, recorded_at, baseline_id, change, parts FROM (
  SELECT d.server_id, c.v->>'name' AS tool_name, d.recorded_at, d.baseline_id, 'changed' AS change, c.v->'changes' AS parts, d.seq
    FROM drift_baselines d, jsonb_array_elements(d.changes->'changed') AS c(v) WHERE d.drift_detected AND length(c.v->>'name') <= 512
  UNION ALL
  SELECT d.server_id, a.v, d.recorded_at, d.baseline_id, 'added', '[]'::jsonb, d.seq
    FROM drift_baselines d, jsonb_array_elements_text(d.changes->'added') AS a(v) WHERE d.drift_detected AND length(a.v) <= 512
) x
-- Only tools still in their server's latest baseline (a later drift that removed one deleted its row).
WHERE EXISTS (
  SELECT 1 FROM (SELECT DISTINCT ON (l.server_id) l.tools FROM drift_baselines l WHERE l.server_id = x.server_id ORDER BY l.server_id, l.recorded_at DESC, l.seq DESC) latest,
                jsonb_array_elements(latest.tools) AS t(v)
   WHERE t.v->>'name' = x.tool_name)
ORDER BY server_id, tool_name, recorded_at DESC, seq DESC;
