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
/** What a drift changed of a tool as the per-tool gate judges it: its own parts, or its server's instructions. */
export type ToolDriftPart = ToolPart | 'instructions';
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

// ---------------------------------------------------------------------------------------------
// What else a server gives the model besides its tools (docs/probes.md "Drift of what else the
// server says"): the `instructions` of its initialize (or server/discover) result, which clients
// put in the system prompt, its prompts, resources and resource templates. Each is a part of the
// baseline with a hash of its own; prompts, resources and templates are compared item by item.
// ---------------------------------------------------------------------------------------------

export type ContextListPart = 'prompts' | 'resources' | 'resource_templates';
export type ContextPart = 'instructions' | ContextListPart;
export const CONTEXT_LIST_PARTS: readonly ContextListPart[] = ['prompts', 'resources', 'resource_templates'];
export const CONTEXT_PARTS: readonly ContextPart[] = ['instructions', ...CONTEXT_LIST_PARTS];

/**
 * How the items of each list are known (their key: a prompt's name, a resource's uri, a
 * template's uriTemplate) and which of their fields are compared (wire name -> part name, as
 * drift reports name them). Everything else an item carries (`icons`, `size`, `annotations`,
 * `_meta`) and the order items are listed in never count as change.
 */
export const CONTEXT_ITEM_SHAPES = {
  prompts: { key: 'name', fields: { title: 'title', description: 'description', arguments: 'arguments' } },
  resources: { key: 'uri', fields: { name: 'name', title: 'title', description: 'description', mimeType: 'mime_type' } },
  resource_templates: { key: 'uriTemplate', fields: { name: 'name', title: 'title', description: 'description', mimeType: 'mime_type' } },
} as const satisfies Record<ContextListPart, { key: string; fields: Record<string, string> }>;

/** One listed prompt, resource or template: its key and its compared fields as listed (wire names; absent ones left out). */
export interface ContextItem {
  key: string;
  fields: Record<string, unknown>;
}

/** The item a list entry is compared as; null when it has no string key (the SDK's own schema refuses such an entry first). */
export function contextItemOf(part: ContextListPart, raw: Record<string, unknown>): ContextItem | null {
  const shape = CONTEXT_ITEM_SHAPES[part];
  const key = raw[shape.key];
  if (typeof key !== 'string') return null;
  const fields: Record<string, unknown> = {};
  for (const f of Object.keys(shape.fields)) if (raw[f] !== undefined) fields[f] = raw[f];
  return { key, fields };
}

/** How one list was found by a probe: read (every page), not offered (the capability is not announced), or unavailable (and why). */
export type ContextListing = { status: 'read'; items: ContextItem[]; pages: number } | { status: 'not_offered' } | { status: 'unavailable'; detail: string };

/** What a probe read of a server's context. `instructions` null: the server gave none. */
export interface LiveContext {
  instructions: string | null;
  prompts: ContextListing;
  resources: ContextListing;
  resource_templates: ContextListing;
}

/** An item's hashes as a baseline stores them: the whole item's, and each compared part's (by part name). */
export interface ContextItemHashes {
  key: string;
  hash: string;
  parts: Record<string, string>;
}

/**
 * One part of a baseline's context. `hash` is what is compared: the SHA-256 of the instructions'
 * canonical JSON (null instructions hash as JSON null) or of a list's (key, hash) pairs in
 * canonical order (a list not offered hashes as the empty list). An unavailable part keeps the
 * hash and count of the last reading (null when none was ever read), so a part the probe could
 * not read for a while is compared with what was last read, never with nothing.
 */
export interface ContextPartState {
  status: 'read' | 'not_offered' | 'unavailable';
  hash: string | null;
  /** Items listed (lists only; null for instructions or never read). */
  count: number | null;
  /** Why the part is unavailable; null otherwise. */
  detail: string | null;
}

export type BaselineContext = Record<ContextPart, ContextPartState>;

/** The item hashes of each distinct list, by list hash (stored once per list). */
export type ContextLists = Map<string, ContextItemHashes[]>;

function partHash(v: unknown, texts?: PartTexts): string {
  const canonical = jcs(v);
  const hash = sha256Hex(canonical);
  texts?.set(hash, canonical);
  return hash;
}

/** Hashes one item; with `texts`, each compared part's canonical text is added under its hash. */
export function hashContextItem(part: ContextListPart, item: ContextItem, texts?: PartTexts): ContextItemHashes {
  const shape = CONTEXT_ITEM_SHAPES[part];
  const whole: Record<string, unknown> = { [shape.key]: item.key };
  const parts: Record<string, string> = {};
  for (const [wire, name] of Object.entries(shape.fields)) {
    if (item.fields[wire] !== undefined) whole[wire] = item.fields[wire];
    parts[name] = partHash(item.fields[wire], texts);
  }
  return { key: item.key, hash: sha256Hex(jcs(whole)), parts };
}

/** The hash of a list of item hashes (already in canonical order). */
function listHashOf(items: ContextItemHashes[]): string {
  return sha256Hex(jcs(items.map((i) => ({ key: i.key, hash: i.hash }))));
}

/** A list's items hashed in canonical order (key, then hash), and its hash. */
export function hashContextList(part: ContextListPart, items: ContextItem[], texts?: PartTexts): { hash: string; items: ContextItemHashes[] } {
  const hashed = items.map((i) => hashContextItem(part, i, texts)).sort((a, b) => (a.key !== b.key ? (a.key < b.key ? -1 : 1) : a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
  return { hash: listHashOf(hashed), items: hashed };
}

/** The hash of the empty list: what a list not offered is compared as. */
export const EMPTY_LIST_HASH = listHashOf([]);

/**
 * A baseline's context from what a probe read (`live` null: this check did not read it, every
 * part unavailable), with the lists (by hash) and part texts it holds. `prev` is the previous
 * baseline's context: an unavailable part carries its hash and count.
 */
export function hashContext(live: LiveContext | null, prev: BaselineContext | null): { context: BaselineContext; lists: ContextLists; texts: PartTexts } {
  const texts: PartTexts = new Map();
  const lists: ContextLists = new Map();
  const carried = (part: ContextPart, detail: string): ContextPartState => ({ status: 'unavailable', hash: prev?.[part]?.hash ?? null, count: prev?.[part]?.count ?? null, detail });
  const context = {} as BaselineContext;
  context.instructions = live
    ? { status: live.instructions === null ? 'not_offered' : 'read', hash: partHash(live.instructions, texts), count: null, detail: null }
    : carried('instructions', 'not read by this check');
  for (const part of CONTEXT_LIST_PARTS) {
    const l = live?.[part];
    if (!l) context[part] = carried(part, 'not read by this check');
    else if (l.status === 'unavailable') context[part] = carried(part, l.detail);
    else if (l.status === 'not_offered') {
      lists.set(EMPTY_LIST_HASH, []);
      context[part] = { status: 'not_offered', hash: EMPTY_LIST_HASH, count: 0, detail: null };
    } else {
      const h = hashContextList(part, l.items, texts);
      lists.set(h.hash, h.items);
      context[part] = { status: 'read', hash: h.hash, count: h.items.length, detail: null };
    }
  }
  return { context, lists, texts };
}

/** The hash of a whole context (what a receipt signs): its parts' compared hashes. */
export function contextHashOf(c: BaselineContext): string {
  return sha256Hex(jcs(Object.fromEntries(CONTEXT_PARTS.map((p) => [p, c[p].hash]))));
}

/** Which items of one list were added, removed or changed (keys sorted; `changes` names the parts). */
export interface ItemDiff {
  added: string[];
  removed: string[];
  changed: { key: string; changes: string[] }[];
}

/** What changed of a server's context: `instructions` true when they changed (appeared or went too). */
export interface ContextDiff {
  instructions: boolean;
  prompts: ItemDiff;
  resources: ItemDiff;
  resource_templates: ItemDiff;
}

const NO_ITEMS: ItemDiff = Object.freeze({ added: [], removed: [], changed: [] }) as ItemDiff;

export function emptyContextDiff(): ContextDiff {
  return { instructions: false, prompts: NO_ITEMS, resources: NO_ITEMS, resource_templates: NO_ITEMS };
}

/** Items compared by key: multisets of item hashes per key, as diffManifests compares tools. */
export function diffContextItems(part: ContextListPart, prev: ContextItemHashes[], next: ContextItemHashes[]): ItemDiff {
  const group = (list: ContextItemHashes[]) => {
    const m = new Map<string, ContextItemHashes[]>();
    for (const i of list) m.set(i.key, [...(m.get(i.key) ?? []), i]);
    return m;
  };
  const before = group(prev);
  const after = group(next);
  const names = Object.values(CONTEXT_ITEM_SHAPES[part].fields) as string[];
  const added = [...after.keys()].filter((k) => !before.has(k)).sort();
  const removed = [...before.keys()].filter((k) => !after.has(k)).sort();
  const changed: ItemDiff['changed'] = [];
  for (const [key, ns] of [...after].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const ps = before.get(key);
    if (!ps || sameMultiset(ps.map((p) => p.hash), ns.map((n) => n.hash))) continue;
    const parts = names.filter((n) => !sameMultiset(ps.map((p) => p.parts[n] ?? ''), ns.map((x) => x.parts[n] ?? '')));
    changed.push({ key, changes: parts.length > 0 ? parts : ['description'] });
  }
  return { added, removed, changed };
}

/**
 * What changed from `prev` to `next`. A part is compared only when both sides are known: a
 * previous baseline without context (recorded before contexts were, or whose part was never
 * read) and a part this check could not read are no change. `prevLists` holds the previous
 * baseline's lists by hash; a list that is gone counts as unknown too.
 */
export function diffContext(prev: BaselineContext | null, next: BaselineContext, prevLists: ContextLists, nextLists: ContextLists): ContextDiff {
  const d = emptyContextDiff();
  if (!prev) return d;
  const comparable = (p: ContextPart) => prev[p]?.hash != null && next[p].status !== 'unavailable' && next[p].hash !== null && prev[p].hash !== next[p].hash;
  d.instructions = comparable('instructions');
  for (const part of CONTEXT_LIST_PARTS) {
    if (!comparable(part)) continue;
    const before = prevLists.get(prev[part].hash!);
    const after = nextLists.get(next[part].hash!);
    if (!before || !after) continue;
    d[part] = diffContextItems(part, before, after);
  }
  return d;
}

export function hasContextDrift(d: ContextDiff): boolean {
  return d.instructions || CONTEXT_LIST_PARTS.some((p) => d[p].added.length + d[p].removed.length + d[p].changed.length > 0);
}

/** The context parts a diff found changed, in CONTEXT_PARTS order. */
export function changedContextParts(d: ContextDiff): ContextPart[] {
  return CONTEXT_PARTS.filter((p) => (p === 'instructions' ? d.instructions : d[p].added.length + d[p].removed.length + d[p].changed.length > 0));
}
