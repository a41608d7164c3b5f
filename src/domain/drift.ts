import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';

// Tool-manifest drift (docs/probes.md "Drift"): each tool is hashed over the RFC 8785 (JCS)
// canonical form of what an agent relies on, so key order and whitespace never count as change.
// Pure: no I/O, time passed in.

/** The anomaly flag a recent drift raises on the server's trust record. */
export const DRIFT_FLAG = 'tool_manifest_drift';
/** How long a detected drift keeps the flag raised (re-baselining does not clear it sooner). */
export const DRIFT_FLAG_WINDOW_MS = 7 * 24 * 3600 * 1000;

/** A tool as listed by tools/list (only the parts we hash are read). */
export interface ManifestTool {
  name: string;
  description?: unknown;
  inputSchema?: unknown;
  outputSchema?: unknown;
  annotations?: unknown;
}

/**
 * The parts of a listed tool that drift compares: what an agent relies on. Everything else a
 * tools/list answer carries is per-response or presentational and never counts as drift: the
 * result's `ttlMs`, `cacheScope`, `nextCursor` and `_meta` (MCP 2026-07-28 cache hints, paging),
 * a tool's own `_meta`, `title`, `icons` and `execution`, and the order tools are listed in.
 */
export function manifestToolOf(t: { name: string; description?: unknown; inputSchema?: unknown; outputSchema?: unknown; annotations?: unknown }): ManifestTool {
  const tool: ManifestTool = { name: t.name };
  if (t.description !== undefined) tool.description = t.description;
  if (t.inputSchema !== undefined) tool.inputSchema = t.inputSchema;
  if (t.outputSchema !== undefined) tool.outputSchema = t.outputSchema;
  if (t.annotations !== undefined) tool.annotations = t.annotations;
  return tool;
}

/** Per-tool hashes stored with a baseline. */
export interface ToolHashes {
  name: string;
  hash: string;
  description: string;
  input_schema: string;
  output_schema: string;
  annotations: string;
}

export type ToolPart = 'description' | 'input_schema' | 'output_schema' | 'annotations';
export const TOOL_PARTS: readonly ToolPart[] = ['description', 'input_schema', 'output_schema', 'annotations'];

export function sha256Hex(s: string): string {
  return createHash('sha256').update(s, 'utf8').digest('hex');
}

/** RFC 8785 canonical JSON; absent (undefined) parts are hashed as null. */
export function jcs(value: unknown): string {
  const out = canonicalize(value === undefined ? null : value);
  if (out === undefined) throw new Error('value has no JSON form');
  return out;
}

/** The canonical text (RFC 8785) of each part of a tool, keyed by the SHA-256 that ToolHashes stores. */
export type PartTexts = Map<string, string>;

/** Hashes one tool; when `texts` is given, each part's canonical text is added under its hash. */
export function hashTool(t: ManifestTool, texts?: PartTexts): ToolHashes {
  const whole: Record<string, unknown> = { name: t.name };
  if (t.description !== undefined) whole.description = t.description;
  if (t.inputSchema !== undefined) whole.inputSchema = t.inputSchema;
  if (t.outputSchema !== undefined) whole.outputSchema = t.outputSchema;
  if (t.annotations !== undefined) whole.annotations = t.annotations;
  const part = (v: unknown) => {
    const canonical = jcs(v);
    const hash = sha256Hex(canonical);
    texts?.set(hash, canonical);
    return hash;
  };
  return {
    name: t.name,
    hash: sha256Hex(jcs(whole)),
    description: part(t.description),
    input_schema: part(t.inputSchema),
    output_schema: part(t.outputSchema),
    annotations: part(t.annotations),
  };
}

/** Canonical order of hashed tools: by name, then by hash (a server listing one name twice still hashes the same). */
function canonicalOrder(a: ToolHashes, b: ToolHashes): number {
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0;
}

/**
 * Hashes a whole manifest in canonical order, whatever order the server listed the tools in (the
 * 2026-07-28 spec asks servers for a deterministic order; older servers do not give one):
 * tools sorted by name (then hash), manifest hash over the (name, hash) list; `texts`
 * holds the canonical text of every part by its hash (content-addressed, so the /drift page can
 * show what a changed part said before and after).
 */
export function hashManifest(tools: ManifestTool[]): { manifest_hash: string; tools: ToolHashes[]; texts: PartTexts } {
  const texts: PartTexts = new Map();
  const hashed = tools.map((t) => hashTool(manifestToolOf(t), texts)).sort(canonicalOrder);
  return { manifest_hash: sha256Hex(jcs(hashed.map((t) => ({ name: t.name, hash: t.hash })))), tools: hashed, texts };
}

export interface ManifestDiff {
  added: string[];
  removed: string[];
  changed: { name: string; changes: ToolPart[] }[];
}

/** The stored hashes of each name's definitions (one, unless a list holds a name twice). */
function byName(tools: ToolHashes[]): Map<string, ToolHashes[]> {
  const out = new Map<string, ToolHashes[]>();
  for (const t of tools) {
    const list = out.get(t.name);
    if (list) list.push(t);
    else out.set(t.name, [t]);
  }
  return out;
}

/** Whether two lists hold the same strings, each as often (order ignored). */
function sameMultiset(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  if (a.length === 1) return a[0] === b[0];
  const x = [...a].sort();
  const y = [...b].sort();
  return x.every((v, i) => v === y[i]);
}

/**
 * What changed from `prev` to `next` (both as stored hashes); names sorted. Exact: the diff is
 * empty exactly when the two manifest hashes are equal (both cover the same (name, hash) pairs).
 * The probe refuses a manifest listing a name twice, but a list that does (a baseline stored
 * before that) is compared per name as a whole: a name whose definitions differ in any way is
 * changed, so no copy of a name can hide a change of another.
 */
export function diffManifests(prev: ToolHashes[], next: ToolHashes[]): ManifestDiff {
  const before = byName(prev);
  const after = byName(next);
  const added = [...after.keys()].filter((n) => !before.has(n)).sort();
  const removed = [...before.keys()].filter((n) => !after.has(n)).sort();
  const changed: ManifestDiff['changed'] = [];
  for (const [name, ts] of [...after].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const ps = before.get(name);
    if (!ps || sameMultiset(ps.map((p) => p.hash), ts.map((t) => t.hash))) continue;
    const parts = TOOL_PARTS.filter((k) => !sameMultiset(ps.map((p) => p[k]), ts.map((t) => t[k])));
    changed.push({ name, changes: parts.length > 0 ? parts : ['description'] });
  }
  return { added, removed, changed };
}

export function hasDrift(d: ManifestDiff): boolean {
  return d.added.length + d.removed.length + d.changed.length > 0;
}

/** Whether the drift flag is raised: the last detected drift is recent enough. */
export function driftFlagActive(lastDriftAt: Date | null, now: Date): boolean {
  return lastDriftAt !== null && now.getTime() - lastDriftAt.getTime() <= DRIFT_FLAG_WINDOW_MS && lastDriftAt.getTime() <= now.getTime() + 60_000;
}
