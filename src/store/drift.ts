import type { Queryable } from '../db/index.js';
import { changedContextParts, type BaselineContext, type ContextDiff, type ContextItemHashes, type ContextLists, type ManifestDiff, type ToolHashes, type ToolPart } from '../domain/drift.js';

export interface DriftBaselineRow {
  baseline_id: string;
  server_id: number;
  recorded_at: Date;
  manifest_hash: string;
  tool_count: number;
  tools: ToolHashes[];
  previous_baseline_id: string | null;
  drift_detected: boolean;
  changes: ManifestDiff;
  receipt_id: string;
  /** The server's instructions, prompts, resources and templates as of this baseline; null before migration 1670. */
  context: BaselineContext | null;
  /** What of them changed since the previous baseline; null when nothing did (or dropped by the storage job). */
  context_changes: ContextDiff | null;
  /** The server's latest change of instructions as of this baseline (carried forward). */
  instructions_drift_at: Date | null;
}

/** A server's latest baseline as the /drift page lists it. */
export interface BaselineSummaryRow {
  baseline_id: string;
  server_id: number;
  recorded_at: Date;
  manifest_hash: string;
  tool_count: number;
  drift_detected: boolean;
  receipt_id: string;
  url: string;
  name: string;
  slug: string;
}

/** A server's latest drift as the /drift page shows it: `changes` cut to the first names of each list, `counts` whole. */
export interface DriftSummaryRow extends Omit<BaselineSummaryRow, 'drift_detected'> {
  previous_baseline_id: string | null;
  prev_recorded_at: Date | null;
  changes: ManifestDiff;
  counts: { added: number; removed: number; changed: number };
  /** This baseline's and the previous one's context (null before migration 1670). */
  context: BaselineContext | null;
  prev_context: BaselineContext | null;
  /** Cut like `changes`: each list to its first names; `context_counts` has the whole lengths. */
  context_changes: ContextDiff | null;
  context_counts: Record<'prompts' | 'resources' | 'resource_templates', { added: number; removed: number; changed: number }> | null;
}

/** One tool's drift (drift_tool_changes). */
export interface ToolDriftRow {
  recorded_at: Date;
  change: 'changed' | 'added';
  parts: ToolPart[];
}

const COLUMNS = 'baseline_id, server_id, recorded_at, manifest_hash, tool_count, tools, previous_baseline_id, drift_detected, changes, receipt_id, context, context_changes, instructions_drift_at';

/** The context lists a change list names (jsonb paths of context and context_changes), and the same as a VALUES list. */
const CONTEXT_LISTS = ['prompts', 'resources', 'resource_templates'] as const;
const CONTEXT_LIST_VALUES = `(VALUES ${CONTEXT_LISTS.map((l) => `('${l}')`).join(', ')})`;

export function driftStore(db: Queryable) {
  return {
    /** Serialises baselining of one server inside a transaction (row lock on the server). */
    async lockServer(serverId: number): Promise<void> {
      await db.query('SELECT id FROM servers WHERE id = $1 FOR UPDATE', [serverId]);
    },

    /** A server's latest baseline with its tool list; `manifest_stored`: the list is in drift_manifests (baselines before migration 1610 kept their own copy). */
    async latest(serverId: number): Promise<(DriftBaselineRow & { manifest_stored: boolean }) | null> {
      const rows = await db.query<DriftBaselineRow & { manifest_stored: boolean }>(
        `SELECT ${COLUMNS.split(', ').map((c) => (c === 'tools' ? 'coalesce(d.tools, m.tools) AS tools' : `d.${c}`)).join(', ')}, m.manifest_hash IS NOT NULL AS manifest_stored
           FROM (SELECT * FROM drift_baselines WHERE server_id = $1 ORDER BY recorded_at DESC, seq DESC LIMIT 1) d
           LEFT JOIN drift_manifests m ON m.manifest_hash = d.manifest_hash`,
        [serverId],
      );
      return rows[0] ?? null;
    },

    /** A server's latest baseline without its tool list (what the compliance controls cite). */
    async latestSummary(serverId: number): Promise<Pick<DriftBaselineRow, 'baseline_id' | 'recorded_at' | 'receipt_id' | 'manifest_hash'> | null> {
      const rows = await db.query<Pick<DriftBaselineRow, 'baseline_id' | 'recorded_at' | 'receipt_id' | 'manifest_hash'>>(
        'SELECT baseline_id, recorded_at, receipt_id, manifest_hash FROM drift_baselines WHERE server_id = $1 ORDER BY recorded_at DESC, seq DESC LIMIT 1',
        [serverId],
      );
      return rows[0] ?? null;
    },

    /**
     * Records a baseline; its tool list is stored once per manifest (drift_manifests), so a
     * baseline of a manifest already stored adds no copy of it (`knownManifest`: the caller knows
     * it is stored, e.g. the previous baseline had the same hash, and the list is not even sent).
     * `textBytes`: bytes of part texts this baseline newly stored (saveTexts).
     */
    async insert(r: DriftBaselineRow, textBytes: number, knownManifest = false): Promise<void> {
      if (!knownManifest) {
        // A list already stored is marked used (and locked), so a concurrent storage job keeps it.
        await db.query('INSERT INTO drift_manifests (manifest_hash, tools, used_at) VALUES ($1, $2, $3) ON CONFLICT (manifest_hash) DO UPDATE SET used_at = EXCLUDED.used_at', [
          r.manifest_hash,
          JSON.stringify(r.tools),
          r.recorded_at,
        ]);
      }
      await db.query(
        `INSERT INTO drift_baselines (${COLUMNS}, text_bytes, tools_added, tools_removed, tools_changed, context_changed)
         VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
        [
          r.baseline_id,
          r.server_id,
          r.recorded_at,
          r.manifest_hash,
          r.tool_count,
          r.previous_baseline_id,
          r.drift_detected,
          JSON.stringify(r.changes),
          r.receipt_id,
          r.context === null ? null : JSON.stringify(r.context),
          r.context_changes === null ? null : JSON.stringify(r.context_changes),
          r.instructions_drift_at,
          textBytes,
          r.changes.added.length,
          r.changes.removed.length,
          r.changes.changed.length,
          r.context_changes === null ? [] : changedContextParts(r.context_changes),
        ],
      );
    },

    /**
     * Stores context lists by hash (the hash fixes the list), marking each used now: a list
     * already stored keeps its row with used_at moved (and locked), so a concurrent storage job
     * keeps it. The caller leaves out lists it knows are stored and kept (the previous baseline's).
     */
    async saveContextLists(lists: ContextLists, at: Date): Promise<void> {
      if (lists.size === 0) return;
      const hashes = [...lists.keys()].sort();
      await db.query(
        `INSERT INTO drift_context_lists AS l (list_hash, items, used_at)
         SELECT h, i::jsonb, $3 FROM unnest($1::text[], $2::text[]) AS t(h, i) ORDER BY h
         ON CONFLICT (list_hash) DO UPDATE SET used_at = EXCLUDED.used_at`,
        [hashes, hashes.map((h) => JSON.stringify(lists.get(h))), at],
      );
    },

    /** The stored entries of these context lists (unknown hashes are absent). */
    async contextLists(hashes: string[]): Promise<ContextLists> {
      if (hashes.length === 0) return new Map();
      const rows = await db.query<{ list_hash: string; items: ContextItemHashes[] }>('SELECT list_hash, items FROM drift_context_lists WHERE list_hash = ANY($1::text[])', [[...new Set(hashes)]]);
      return new Map(rows.map((r) => [r.list_hash, r.items]));
    },

    /** The entries with these keys of these context lists, by list hash (the /drift page reads only what it shows). */
    async contextItems(hashes: string[], keys: string[]): Promise<ContextLists> {
      const out: ContextLists = new Map();
      if (hashes.length === 0 || keys.length === 0) return out;
      const rows = await db.query<{ list_hash: string; item: ContextItemHashes }>(
        `SELECT l.list_hash, e.item FROM drift_context_lists l, jsonb_array_elements(l.items) AS e(item)
          WHERE l.list_hash = ANY($1::text[]) AND e.item->>'key' = ANY($2::text[])`,
        [[...new Set(hashes)], [...new Set(keys)]],
      );
      for (const r of rows) {
        let list = out.get(r.list_hash);
        if (!list) out.set(r.list_hash, (list = []));
        list.push(r.item);
      }
      return out;
    },

    /**
     * Stores part texts by hash (the same hash is always the same text) and answers how many bytes
     * of them were new. A text already stored keeps its row; if it was first seen more than 12
     * hours ago, `first_seen_at` moves to now (and the row is locked), so the storage job, which
     * drops unused texts first seen more than a day ago, never drops one a check is re-using.
     */
    async saveTexts(texts: Map<string, string>, at: Date): Promise<number> {
      if (texts.size === 0) return 0;
      const hashes = [...texts.keys()];
      const rows = await db.query<{ bytes: string | number }>(
        `WITH stored AS (
           INSERT INTO drift_part_texts AS p (hash, canonical, first_seen_at)
           SELECT h, c, $3 FROM unnest($1::text[], $2::text[]) AS t(h, c) ORDER BY h
           ON CONFLICT (hash) DO UPDATE SET first_seen_at = EXCLUDED.first_seen_at WHERE p.first_seen_at < EXCLUDED.first_seen_at - interval '12 hours'
           RETURNING (xmax = 0) AS inserted, octet_length(canonical) AS b)
         SELECT coalesce(sum(b) FILTER (WHERE inserted), 0)::int8 AS bytes FROM stored`,
        [hashes, hashes.map((h) => texts.get(h)!), at],
      );
      return Number(rows[0]?.bytes ?? 0);
    },

    /** Bytes of new texts a server's baselines stored at or after `since` (the daily allowance). */
    async textBytesSince(serverId: number, since: Date): Promise<number> {
      const rows = await db.query<{ bytes: string | number }>('SELECT coalesce(sum(text_bytes), 0)::int8 AS bytes FROM drift_baselines WHERE server_id = $1 AND recorded_at >= $2', [serverId, since]);
      return Number(rows[0]?.bytes ?? 0);
    },

    /** The stored canonical texts of these part hashes (unknown hashes are absent). */
    async texts(hashes: string[]): Promise<Map<string, string>> {
      if (hashes.length === 0) return new Map();
      const rows = await db.query<{ hash: string; canonical: string }>('SELECT hash, canonical FROM drift_part_texts WHERE hash = ANY($1::text[])', [[...new Set(hashes)]]);
      return new Map(rows.map((r) => [r.hash, r.canonical]));
    },

    /** The size in bytes (UTF-8) of the stored texts of these part hashes, without reading them (unknown hashes are absent). */
    async textSizes(hashes: string[]): Promise<Map<string, number>> {
      if (hashes.length === 0) return new Map();
      const rows = await db.query<{ hash: string; bytes: number }>('SELECT hash, octet_length(canonical)::int AS bytes FROM drift_part_texts WHERE hash = ANY($1::text[])', [[...new Set(hashes)]]);
      return new Map(rows.map((r) => [r.hash, r.bytes]));
    },

    async lastDriftAt(serverId: number): Promise<Date | null> {
      const rows = await db.query<{ at: Date | null }>('SELECT max(recorded_at) AS at FROM drift_baselines WHERE server_id = $1 AND drift_detected', [serverId]);
      return rows[0]?.at ?? null;
    },

    /**
     * Keeps each tool's newest drift (drift_tool_changes, the per-tool gate's index): the tools a
     * detected drift changed or added get this drift, the tools it removed lose their row. The
     * table therefore holds at most a server's current tools.
     */
    async recordToolChanges(serverId: number, baselineId: string, at: Date, diff: ManifestDiff): Promise<void> {
      if (diff.removed.length > 0) await db.query('DELETE FROM drift_tool_changes WHERE server_id = $1 AND tool_name = ANY($2::text[])', [serverId, diff.removed]);
      const names = [...diff.changed.map((c) => c.name), ...diff.added];
      if (names.length === 0) return;
      const kinds = [...diff.changed.map(() => 'changed'), ...diff.added.map(() => 'added')];
      const parts = [...diff.changed.map((c) => JSON.stringify(c.changes)), ...diff.added.map(() => '[]')];
      await db.query(
        `INSERT INTO drift_tool_changes AS d (server_id, tool_name, recorded_at, baseline_id, change, parts)
         SELECT $1, t.n, $3, $2, t.c, t.p::jsonb FROM unnest($4::text[], $5::text[], $6::text[]) AS t(n, c, p) ORDER BY t.n
         ON CONFLICT (server_id, tool_name) DO UPDATE SET recorded_at = EXCLUDED.recorded_at, baseline_id = EXCLUDED.baseline_id,
           change = EXCLUDED.change, parts = EXCLUDED.parts`,
        [serverId, baselineId, at, names, kinds, parts],
      );
    },

    /** The newest drift of `tool` on a server if it was at or after `since` (per-tool gate), read by key. */
    async toolDriftSince(serverId: number, tool: string, since: Date): Promise<ToolDriftRow | null> {
      const rows = await db.query<ToolDriftRow>(
        'SELECT recorded_at, change, parts FROM drift_tool_changes WHERE server_id = $1 AND tool_name = $2 AND recorded_at >= $3',
        [serverId, tool, since],
      );
      return rows[0] ?? null;
    },

    /**
     * What the per-tool gate reads of one tool, in one statement: the server's latest baseline
     * (its manifest hash: the listing check, with manifestNames; the time of the server's latest
     * change of instructions, carried from baseline to baseline) and the tool's newest drift, each
     * if it was at or after `since` (null `since`: not read).
     */
    async toolGateRow(
      serverId: number,
      tool: string,
      since: Date | null,
    ): Promise<{ latest: { baseline_id: string; manifest_hash: string } | null; drift: ToolDriftRow | null; instructionsDriftAt: Date | null }> {
      const rows = await db.query<{
        baseline_id: string | null;
        manifest_hash: string | null;
        recorded_at: Date | null;
        change: ToolDriftRow['change'] | null;
        parts: ToolPart[] | null;
        instructions_drift_at: Date | null;
      }>(
        `SELECT b.baseline_id, b.manifest_hash, c.recorded_at, c.change, c.parts, b.instructions_drift_at
           FROM (SELECT 1) one
           LEFT JOIN LATERAL (SELECT baseline_id, manifest_hash, instructions_drift_at FROM drift_baselines WHERE server_id = $1 ORDER BY recorded_at DESC, seq DESC LIMIT 1) b ON true
           LEFT JOIN drift_tool_changes c ON $3::timestamptz IS NOT NULL AND c.server_id = $1 AND c.tool_name = $2 AND c.recorded_at >= $3`,
        [serverId, tool, since],
      );
      const r = rows[0];
      const instructionsAt = r?.instructions_drift_at ?? null;
      return {
        latest: r?.baseline_id && r.manifest_hash ? { baseline_id: r.baseline_id, manifest_hash: r.manifest_hash } : null,
        drift: r?.recorded_at && r.change ? { recorded_at: r.recorded_at, change: r.change, parts: r.parts ?? [] } : null,
        instructionsDriftAt: since !== null && instructionsAt !== null && instructionsAt.getTime() >= since.getTime() ? instructionsAt : null,
      };
    },

    /** The tool names a baseline's list holds (null: its list is gone, which the storage job never does to a latest baseline). */
    async manifestNames(baselineId: string): Promise<string[] | null> {
      const rows = await db.query<{ names: string[] | null }>(
        `SELECT CASE WHEN l.tools IS NULL THEN NULL ELSE coalesce((SELECT array_agg(e->>'name') FROM jsonb_array_elements(l.tools) e), '{}') END AS names
           FROM drift_baselines b LEFT JOIN drift_manifests m ON b.tools IS NULL AND m.manifest_hash = b.manifest_hash,
                LATERAL (SELECT coalesce(b.tools, m.tools) AS tools) l
          WHERE b.baseline_id = $1`,
        [baselineId],
      );
      return rows[0]?.names ?? null;
    },

    /** Servers with a drift detected at or after `since`, with the time of their latest one. */
    async driftedSince(since: Date): Promise<Map<number, Date>> {
      const rows = await db.query<{ server_id: number; at: Date }>(
        'SELECT server_id, max(recorded_at) AS at FROM drift_baselines WHERE drift_detected AND recorded_at >= $1 GROUP BY server_id',
        [since],
      );
      return new Map(rows.map((r) => [Number(r.server_id), r.at]));
    },

    /**
     * Detected drifts of a server within [from, to), oldest first, at most `limit` (compliance
     * exports, which list receipts to the same bound): how many tools each added, removed and
     * changed, and which parts of the server's context changed (columns: the lists of old
     * baselines are dropped by collectGarbage).
     */
    async driftsBetween(serverId: number, from: Date, to: Date, limit = 1000): Promise<{ baseline_id: string; recorded_at: Date; added: number; removed: number; changed: number; context: string[] }[]> {
      return db.query(
        `SELECT baseline_id, recorded_at, tools_added AS added, tools_removed AS removed, tools_changed AS changed, context_changed AS context
           FROM drift_baselines WHERE server_id = $1 AND drift_detected AND recorded_at >= $2 AND recorded_at < $3 ORDER BY recorded_at, seq LIMIT $4`,
        [serverId, from, to, limit],
      );
    },

    /**
     * The newest baselines that detected drift (at most one per server: its latest drift), newest
     * first, with the previous baseline's time and the server's identity. Each list of `changes`
     * comes back cut to its first `namesPerList` names (`counts` has the whole lengths): what a
     * page shows of a drift stays bounded however many tools a server changed. Tool hashes are
     * read separately, for the tools shown only (toolHashes).
     */
    async recentDrifts(limit: number, namesPerList: number): Promise<DriftSummaryRow[]> {
      const firstOf = (path: string) =>
        `coalesce((SELECT jsonb_agg(e.v ORDER BY e.o) FROM jsonb_array_elements(${path}) WITH ORDINALITY AS e(v, o) WHERE e.o <= $2), '[]'::jsonb)`;
      const firstNames = (list: string) => firstOf(`x.changes->'${list}'`);
      const lengths = (path: string) => `jsonb_build_object('added', jsonb_array_length(${path}->'added'), 'removed', jsonb_array_length(${path}->'removed'), 'changed', jsonb_array_length(${path}->'changed'))`;
      const cutList = (l: string) => `'${l}', jsonb_build_object('added', ${firstOf(`x.context_changes->'${l}'->'added'`)}, 'removed', ${firstOf(`x.context_changes->'${l}'->'removed'`)}, 'changed', ${firstOf(`x.context_changes->'${l}'->'changed'`)})`;
      return db.query(
        `SELECT x.baseline_id, x.server_id, x.recorded_at, x.manifest_hash, x.tool_count, x.previous_baseline_id, x.receipt_id,
                x.url, x.name, x.slug, p.recorded_at AS prev_recorded_at,
                jsonb_build_object('added', ${firstNames('added')}, 'removed', ${firstNames('removed')}, 'changed', ${firstNames('changed')}) AS changes,
                ${lengths('x.changes')} AS counts,
                x.context, p.context AS prev_context,
                CASE WHEN x.context_changes IS NULL THEN NULL
                     ELSE jsonb_build_object('instructions', x.context_changes->'instructions', ${CONTEXT_LISTS.map(cutList).join(', ')}) END AS context_changes,
                CASE WHEN x.context_changes IS NULL THEN NULL
                     ELSE jsonb_build_object(${CONTEXT_LISTS.map((l) => `'${l}', ${lengths(`x.context_changes->'${l}'`)}`).join(', ')}) END AS context_counts
           FROM (SELECT * FROM (
                   SELECT DISTINCT ON (d.server_id) d.baseline_id, d.server_id, d.recorded_at, d.manifest_hash, d.tool_count,
                          d.previous_baseline_id, d.receipt_id, d.changes, d.context, d.context_changes, s.url, s.name, s.slug
                     FROM drift_baselines d JOIN servers s ON s.id = d.server_id
                    WHERE d.drift_detected ORDER BY d.server_id, d.recorded_at DESC, d.seq DESC) y
                  ORDER BY recorded_at DESC LIMIT $1) x
           LEFT JOIN drift_baselines p ON p.baseline_id = x.previous_baseline_id
          ORDER BY x.recorded_at DESC`,
        [limit, namesPerList],
      );
    },

    /** The stored hashes of the tools named `names` in each of these baselines (others are not read). */
    async toolHashes(baselineIds: string[], names: string[]): Promise<Map<string, ToolHashes[]>> {
      const out = new Map<string, ToolHashes[]>();
      if (baselineIds.length === 0 || names.length === 0) return out;
      const rows = await db.query<{ baseline_id: string; tool: ToolHashes }>(
        `SELECT b.baseline_id, t.tool
           FROM drift_baselines b LEFT JOIN drift_manifests m ON b.tools IS NULL AND m.manifest_hash = b.manifest_hash,
                jsonb_array_elements(coalesce(b.tools, m.tools)) AS t(tool)
          WHERE b.baseline_id = ANY($1::text[]) AND t.tool->>'name' = ANY($2::text[])`,
        [[...new Set(baselineIds)], [...new Set(names)]],
      );
      for (const r of rows) {
        let list = out.get(r.baseline_id);
        if (!list) out.set(r.baseline_id, (list = []));
        list.push(r.tool);
      }
      return out;
    },

    /**
     * Drops what no reader needs any more (the drift storage job): tool lists (drift_manifests,
     * and the copies baselines kept before migration 1610), context lists (drift_context_lists),
     * part texts and change lists (the counts stay, in columns; a context change list goes whole)
     * stored before `cutoff` that belong to no server's latest baseline, latest
     * drift or the baseline that drift was measured against. Those are all that recordBaseline (the latest), /drift (the latest drift
     * and its predecessor) and nothing else read; the per-tool gate reads drift_tool_changes and
     * the compliance export the change counts. The baselines themselves (hashes, counts, receipt)
     * stay. So what a server's manifests occupy is bounded by its three kept manifests, however
     * often it changes them.
     */
    async collectGarbage(cutoff: Date): Promise<{ manifests: number; copies: number; texts: number; changeLists: number; contextLists: number; contextChanges: number }> {
      const kept = `kept AS (
          SELECT baseline_id FROM (SELECT DISTINCT ON (server_id) baseline_id FROM drift_baselines ORDER BY server_id, recorded_at DESC, seq DESC) l
          UNION
          SELECT x.id FROM (SELECT DISTINCT ON (server_id) baseline_id, previous_baseline_id FROM drift_baselines WHERE drift_detected
                             ORDER BY server_id, recorded_at DESC, seq DESC) d, LATERAL (VALUES (d.baseline_id), (d.previous_baseline_id)) x(id)
           WHERE x.id IS NOT NULL)`;
      const texts = await db.query<{ n: number }>(
        `WITH ${kept},
         lists AS (SELECT coalesce(b.tools, m.tools) AS tools FROM kept JOIN drift_baselines b USING (baseline_id)
                     LEFT JOIN drift_manifests m ON m.manifest_hash = b.manifest_hash),
         ctx AS (SELECT b.context FROM kept JOIN drift_baselines b USING (baseline_id) WHERE b.context IS NOT NULL),
         ctx_lists AS (SELECT DISTINCT ctx.context->p.part->>'hash' AS h FROM ctx, ${CONTEXT_LIST_VALUES} p(part)),
         keep AS (SELECT v.h FROM lists, jsonb_array_elements(lists.tools) e,
                    LATERAL (VALUES (e->>'description'), (e->>'input_schema'), (e->>'output_schema'), (e->>'annotations')) v(h)
                  UNION SELECT ctx.context->'instructions'->>'hash' FROM ctx
                  UNION SELECT t.v FROM ctx_lists JOIN drift_context_lists cl ON cl.list_hash = ctx_lists.h, jsonb_array_elements(cl.items) i,
                    jsonb_each_text(i->'parts') t(k, v)),
         gone AS (DELETE FROM drift_part_texts t WHERE t.first_seen_at < $1 AND NOT EXISTS (SELECT 1 FROM keep WHERE keep.h = t.hash) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      const contextLists = await db.query<{ n: number }>(
        `WITH ${kept},
         gone AS (DELETE FROM drift_context_lists l WHERE l.used_at < $1
                    AND NOT EXISTS (SELECT 1 FROM kept JOIN drift_baselines b USING (baseline_id), ${CONTEXT_LIST_VALUES} p(part)
                                     WHERE b.context->p.part->>'hash' = l.list_hash) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      const manifests = await db.query<{ n: number }>(
        `WITH ${kept},
         gone AS (DELETE FROM drift_manifests m WHERE m.used_at < $1
                    AND NOT EXISTS (SELECT 1 FROM kept JOIN drift_baselines b USING (baseline_id) WHERE b.manifest_hash = m.manifest_hash) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      const copies = await db.query<{ n: number }>(
        `WITH ${kept},
         gone AS (UPDATE drift_baselines b SET tools = NULL WHERE b.tools IS NOT NULL AND b.recorded_at < $1
                    AND NOT EXISTS (SELECT 1 FROM kept WHERE kept.baseline_id = b.baseline_id) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      const lists = await db.query<{ n: number }>(
        `WITH ${kept},
         gone AS (UPDATE drift_baselines b SET changes = '{"added": [], "removed": [], "changed": []}'::jsonb
                   WHERE b.drift_detected AND b.recorded_at < $1 AND b.changes <> '{"added": [], "removed": [], "changed": []}'::jsonb
                     AND NOT EXISTS (SELECT 1 FROM kept WHERE kept.baseline_id = b.baseline_id) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      const contextChanges = await db.query<{ n: number }>(
        `WITH ${kept},
         gone AS (UPDATE drift_baselines b SET context_changes = NULL
                   WHERE b.context_changes IS NOT NULL AND b.recorded_at < $1
                     AND NOT EXISTS (SELECT 1 FROM kept WHERE kept.baseline_id = b.baseline_id) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [cutoff],
      );
      return {
        manifests: manifests[0]?.n ?? 0,
        copies: copies[0]?.n ?? 0,
        texts: texts[0]?.n ?? 0,
        changeLists: lists[0]?.n ?? 0,
        contextLists: contextLists[0]?.n ?? 0,
        contextChanges: contextChanges[0]?.n ?? 0,
      };
    },

    /** Every server's latest baseline (drifted or not), newest first, with the server's identity; no tool lists. */
    async latestBaselines(limit: number): Promise<BaselineSummaryRow[]> {
      return db.query(
        `SELECT * FROM (
           SELECT DISTINCT ON (d.server_id) d.baseline_id, d.server_id, d.recorded_at, d.manifest_hash, d.tool_count, d.drift_detected,
                  d.receipt_id, s.url, s.name, s.slug
             FROM drift_baselines d JOIN servers s ON s.id = d.server_id ORDER BY d.server_id, d.recorded_at DESC, d.seq DESC) x
          ORDER BY recorded_at DESC LIMIT $1`,
        [limit],
      );
    },
  };
}

export type DriftStore = ReturnType<typeof driftStore>;
