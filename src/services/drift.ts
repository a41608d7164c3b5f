import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetDriftRequest, GetDriftResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import type { Queryable } from '../db/index.js';
import {
  changedContextParts,
  CONTEXT_LIST_PARTS,
  CONTEXT_PARTS,
  contextHashOf,
  diffContext,
  diffManifests,
  DRIFT_FLAG,
  DRIFT_FLAG_WINDOW_MS,
  driftFlagActive,
  hashContext,
  hashManifest,
  hasContextDrift,
  hasDrift,
  TOOL_PARTS,
  CONTEXT_ITEM_SHAPES,
  type BaselineContext,
  type ContextDiff,
  type ContextItemHashes,
  type ContextListPart,
  type ContextPart,
  type LiveContext,
  type ManifestDiff,
  type ManifestTool,
  type ToolHashes,
} from '../domain/drift.js';
import { clipForDisplay, diffLines, newDisplayBudget, readablePart, splitLines, withContext, type DiffLine, type ShownLines } from '../domain/text-diff.js';
import { invalidArgument, notTracked } from '../errors.js';
import { probeError } from '../probes/probe-errors.js';
import { newReceiptId } from '../signing/receipts.js';
import { driftStore, type DriftBaselineRow } from '../store/drift.js';
import { serverStore } from '../store/servers.js';
import type { CallContext, ServiceDeps } from './context.js';
import { createMcpProbeService, type McpProbeService } from './mcp-probe.js';
import { RANKED_STALE_MS, SCORE_CACHE_MS } from './trust-engine.js';
import { cachedFigures } from './cached-figure.js';
import { createProbeSlots, type ProbeSlots } from './probe-slots.js';
import { periodicJob } from './jobs.js';
import { BoundedMap } from '../store/cache-limits.js';
import { dbSignal } from '../store/db-signal.js';

// Time of each server's last detected drift, per database handle, kept for SCORE_CACHE_MS like
// the scores it is shown with: every trust read and pre-flight needs it, and it changes only when
// a drift check records a drift. A check in this process drops the entry at once (forgetDrift);
// the bound covers checks made by another instance. `gen` keeps a read that started before a
// drift was recorded from caching its stale answer.
interface DriftMemo {
  entries: Map<number, { at: Date | null; mono: number }>;
  pending: Map<number, Promise<Date | null>>;
  gen: Map<number, number>;
  /** Counts forgetDrift calls (see driftReadToken). */
  epoch: number;
}
const driftMemos = new WeakMap<Queryable, DriftMemo>();

function driftMemo(db: Queryable): DriftMemo {
  let m = driftMemos.get(db);
  if (!m) driftMemos.set(db, (m = { entries: new BoundedMap(), pending: new Map(), gen: new BoundedMap(), epoch: 0 }));
  return m;
}

function lastDriftAt(db: Queryable, serverId: number): Promise<Date | null> {
  const m = driftMemo(db);
  const hit = m.entries.get(serverId);
  if (hit && performance.now() - hit.mono < SCORE_CACHE_MS) return Promise.resolve(hit.at);
  const inflight = m.pending.get(serverId);
  if (inflight) return inflight;
  const gen = m.gen.get(serverId) ?? 0;
  const p = driftStore(db)
    .lastDriftAt(serverId)
    .then((at) => {
      if ((m.gen.get(serverId) ?? 0) === gen) {
        m.entries.set(serverId, { at, mono: performance.now() });
      }
      return at;
    })
    .finally(() => {
      if (m.pending.get(serverId) === p) m.pending.delete(serverId);
    });
  m.pending.set(serverId, p);
  return p;
}

/** The remembered time of a server's last detected drift (`at` null: none), when read less than SCORE_CACHE_MS ago. */
export function cachedDriftAt(db: Queryable, serverId: number): { at: Date | null } | undefined {
  const hit = driftMemo(db).entries.get(serverId);
  return hit && performance.now() - hit.mono < SCORE_CACHE_MS ? hit : undefined;
}

/**
 * Taken before reading drift times elsewhere (server-facts.ts): rememberDriftAt keeps such a read
 * only if this process recorded no drift meanwhile (of any server: the read may not know its
 * server's id yet, and drift checks are rare).
 */
export function driftReadToken(db: Queryable): number {
  return driftMemo(db).epoch;
}

export function rememberDriftAt(db: Queryable, serverId: number, token: number, at: Date | null): void {
  const m = driftMemo(db);
  if (m.epoch === token) m.entries.set(serverId, { at, mono: performance.now() });
}

const driftRecorded = dbSignal();

/** Calls `fn` whenever this process recorded a drift baseline through `db` (caches of drift figures drop theirs). */
export function onDriftRecorded(db: Queryable, fn: () => void): () => void {
  return driftRecorded.on(db, fn);
}

/** Drops the cached drift time of a server after this process recorded a baseline for it. */
export function forgetDrift(db: Queryable, serverId: number): void {
  driftRecorded.emit(db);
  const m = driftMemo(db);
  m.entries.delete(serverId);
  m.pending.delete(serverId);
  m.gen.set(serverId, (m.gen.get(serverId) ?? 0) + 1);
  m.epoch++;
}

/**
 * Anomaly flags from tool-manifest drift for one server: ["tool_manifest_drift"] while the last
 * detected drift is within DRIFT_FLAG_WINDOW_MS of `now`, else []. The trust service reads this
 * to fill `anomaly.anomaly_flags`. At most SCORE_CACHE_MS stale for drift recorded elsewhere.
 */
export async function toolManifestDriftFlags(db: Queryable, serverId: number, now: Date): Promise<string[]> {
  return driftFlagActive(await lastDriftAt(db, serverId), now) ? [DRIFT_FLAG] : [];
}

/** Ids of the servers whose tool_manifest_drift flag is raised at `now` (see driftFlagActive). */
export async function serversWithDriftFlag(db: Queryable, now: Date): Promise<Set<number>> {
  const drifted = await driftStore(db).driftedSince(new Date(now.getTime() - DRIFT_FLAG_WINDOW_MS));
  return new Set([...drifted].filter(([, at]) => driftFlagActive(at, now)).map(([id]) => id));
}

/**
 * What the /drift page reads of the texts it shows (listDrifts): tools detailed per drift (the
 * rest are counted), bytes of one part's stored text (longer parts are named with their size),
 * bytes of text read for the whole page (newest drifts first; later parts say the page is full).
 * DIFF_DISPLAY_LIMITS bounds the comparing and the characters shown.
 */
export const DRIFT_PAGE_LIMITS = { toolsPerDrift: 50, partTextBytes: 64 * 1024, pageTextBytes: 4 * 1024 * 1024 } as const;

/**
 * One tool part as the /drift page shows it: lines (a diff, or a whole text added or removed, cut
 * by clipForDisplay), or why not: its text was not stored (a baseline older than stored texts, or
 * one recorded over its server's DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY),
 * it is longer than DRIFT_PAGE_LIMITS.partTextBytes, or the page's allowance was used up.
 */
export type ShownPart = ({ kind: 'lines' } & ShownLines) | { kind: 'unknown' } | { kind: 'too_long'; bytes: number } | { kind: 'over_page' };
type NotShown = Exclude<ShownPart, { kind: 'lines' }>;

/** Why a changed part has no diff: a side not stored, else a side too long, else the page was full. */
function whyNotShown(before: string | NotShown, after: string | NotShown): NotShown {
  const sides = [before, after].filter((x): x is NotShown => typeof x !== 'string');
  return sides.find((x) => x.kind === 'unknown') ?? sides.find((x) => x.kind === 'too_long') ?? { kind: 'over_page' };
}

/** The window of DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY: a day. */
const TEXT_ALLOWANCE_WINDOW_MS = 86_400_000;

/** The drift storage job's period, and the age below which nothing is dropped: a day. */
export const DRIFT_STORAGE_PERIOD_MS = 86_400_000;

/** What recordBaseline did. `recorded` false: the manifest was unchanged and its baseline recent (previous, receipt null). */
export interface BaselineResult {
  recorded: boolean;
  baselineId: string;
  recordedAt: Date;
  previous: DriftBaselineRow | null;
  driftDetected: boolean;
  diff: ManifestDiff;
  toolCount: number;
  manifestHash: string;
  receiptId: string;
  receipt: string | null;
  /** The server's context as this baseline keeps it, what changed of it, and whether that is a drift. */
  context: BaselineContext;
  contextDiff: ContextDiff;
  contextDrift: boolean;
}

/** What a drift check records: the tools, and what else the server gives the model when it was read (absent: every part carried). */
export type BaselineManifest = ManifestTool[] | { tools: ManifestTool[]; context?: LiveContext | null };

/** Whether two contexts say the same (status, hash and count of every part; the wording of a reason aside). */
function sameContext(a: BaselineContext | null, b: BaselineContext): boolean {
  return a !== null && CONTEXT_PARTS.every((p) => a[p]?.status === b[p].status && a[p]?.hash === b[p].hash && a[p]?.count === b[p].count);
}

/**
 * The context changes of a diff as GET /api/drift lists them, one entry per change: the
 * instructions, then per list its added, removed and changed entries.
 */
export function contextChangeEntries(d: ContextDiff): { part: ContextPart; change: 'added' | 'removed' | 'changed'; name?: string; changes: string[] }[] {
  const out: ReturnType<typeof contextChangeEntries> = [];
  if (d.instructions) out.push({ part: 'instructions', change: 'changed', changes: [] });
  for (const part of CONTEXT_LIST_PARTS) {
    for (const name of d[part].added) out.push({ part, change: 'added', name, changes: [] });
    for (const name of d[part].removed) out.push({ part, change: 'removed', name, changes: [] });
    for (const c of d[part].changed) out.push({ part, change: 'changed', name: c.key, changes: c.changes });
  }
  return out;
}

/** GetDrift (GET /api/drift): live manifest (and Server Card) -> signed baseline -> per-tool drift report. */
export function createDriftService(deps: ServiceDeps, services: { mcpProbe?: McpProbeService; probeSlots?: ProbeSlots } = {}) {
  const { db, now, receipts, config } = deps;
  const servers = serverStore(db);
  const mcpProbe = services.mcpProbe ?? createMcpProbeService(deps);
  const probeSlots = services.probeSlots ?? createProbeSlots(deps.config.probeConcurrency);

  /**
   * Records a signed baseline of a manifest just read from `server` and compares it with the
   * previous one: THE drift check, used by GET /api/drift and by active observation. With
   * `refreshAfterMs`, an unchanged manifest whose latest baseline is younger than that is not
   * recorded again (observation probes often; the baseline only needs re-signing now and then).
   */
  async function recordBaseline(server: { id: number; url: string }, manifest: BaselineManifest, opts: { refreshAfterMs?: number } = {}): Promise<BaselineResult> {
    const tools = Array.isArray(manifest) ? manifest : manifest.tools;
    const live = Array.isArray(manifest) ? null : (manifest.context ?? null);
    const hashed = hashManifest(tools);
    const result = await db.transaction(async (tx): Promise<BaselineResult> => {
      const store = driftStore(tx);
      await store.lockServer(server.id);
      const latest = await store.latest(server.id);
      // A latest baseline whose list is gone (it cannot be, but a check must never fail for good
      // on it) counts as none: this check records a first baseline again.
      const prev = latest !== null && latest.tools !== null ? latest : null;
      const diff = prev ? diffManifests(prev.tools, hashed.tools) : { added: [], removed: [], changed: [] };
      // The context: compared part by part with the previous baseline's, when both are known (a
      // baseline from before contexts were recorded has none: the first check after the upgrade
      // records it and reports no drift). Only the lists whose hash changed are read.
      const prevContext = prev?.context ?? null;
      const ctx = hashContext(live, prevContext);
      const changedLists = CONTEXT_LIST_PARTS.flatMap((p) => {
        const before = prevContext?.[p]?.hash;
        return before && ctx.context[p].status !== 'unavailable' && ctx.context[p].hash !== before ? [before] : [];
      });
      const contextDiff = diffContext(prevContext, ctx.context, await store.contextLists(changedLists), ctx.lists);
      const contextDrift = prev !== null && hasContextDrift(contextDiff);
      // A changed manifest hash is a drift, whatever the per-name diff says: the hash covers exactly
      // the parts compared, so the two agree (diffManifests is exact, even for a name listed
      // twice); should a stored list ever disagree with its own hash, the hash wins. A change of
      // the context is a drift too (docs/probes.md "Drift of what else the server says").
      const drift = prev !== null && (hasDrift(diff) || prev.manifest_hash !== hashed.manifest_hash || contextDrift);
      const recordedAt = now();
      if (
        opts.refreshAfterMs !== undefined &&
        prev !== null &&
        !drift &&
        prev.manifest_hash === hashed.manifest_hash &&
        sameContext(prevContext, ctx.context) &&
        recordedAt.getTime() - prev.recorded_at.getTime() < opts.refreshAfterMs
      ) {
        return {
          recorded: false,
          baselineId: prev.baseline_id,
          recordedAt: prev.recorded_at,
          previous: null,
          driftDetected: false,
          diff,
          toolCount: prev.tool_count,
          manifestHash: prev.manifest_hash,
          receiptId: prev.receipt_id,
          receipt: null,
          context: prevContext ?? ctx.context,
          contextDiff,
          contextDrift: false,
        };
      }
      const baselineId = newReceiptId();
      const receipt = await receipts.issue(
        'drift_baseline',
        server.url,
        {
          baseline_id: baselineId,
          manifest_hash: hashed.manifest_hash,
          tool_count: hashed.tools.length,
          previous_manifest_hash: prev?.manifest_hash ?? null,
          drift_detected: drift,
          tools_added: diff.added.length,
          tools_removed: diff.removed.length,
          tools_changed: diff.changed.length,
          context_hash: contextHashOf(ctx.context),
          previous_context_hash: prevContext ? contextHashOf(prevContext) : null,
          context_changed: contextDrift ? changedContextParts(contextDiff) : [],
          hash_algorithm: 'sha256(RFC 8785 JCS)',
        },
        { db: tx },
      );
      // The texts are the server's own: within its daily allowance they are kept for /drift, beyond it the baseline keeps hashes only.
      const allowance = config.driftTextBytesPerServerPerDay;
      const texts = ctx.texts.size === 0 ? hashed.texts : new Map([...hashed.texts, ...ctx.texts]);
      const textBytes = allowance === 0 || (await store.textBytesSince(server.id, new Date(recordedAt.getTime() - TEXT_ALLOWANCE_WINDOW_MS))) < allowance ? await store.saveTexts(texts, recordedAt) : 0;
      // Context lists once per list, like tool lists: the previous baseline's are stored (and kept) already.
      const known = new Set(prevContext ? CONTEXT_LIST_PARTS.map((p) => prevContext[p]?.hash) : []);
      await store.saveContextLists(new Map([...ctx.lists].filter(([h]) => !known.has(h))), recordedAt);
      await store.insert({
        baseline_id: baselineId,
        server_id: server.id,
        recorded_at: recordedAt,
        manifest_hash: hashed.manifest_hash,
        tool_count: hashed.tools.length,
        tools: hashed.tools,
        previous_baseline_id: prev?.baseline_id ?? null,
        drift_detected: drift,
        changes: diff,
        receipt_id: receipt.receiptId,
        context: ctx.context,
        context_changes: contextDrift ? contextDiff : null,
        instructions_drift_at: contextDrift && contextDiff.instructions ? recordedAt : (latest?.instructions_drift_at ?? null),
      }, textBytes, prev !== null && prev.manifest_stored && prev.manifest_hash === hashed.manifest_hash);
      if (drift) await store.recordToolChanges(server.id, baselineId, recordedAt, diff);
      return {
        recorded: true,
        baselineId,
        recordedAt,
        previous: prev,
        driftDetected: drift,
        diff,
        toolCount: hashed.tools.length,
        manifestHash: hashed.manifest_hash,
        receiptId: receipt.receiptId,
        receipt: receipt.jws,
        context: ctx.context,
        contextDiff,
        contextDrift,
      };
    });
    // Committed: trust reads and pre-flights in this process see a new baseline at once.
    if (result.recorded) forgetDrift(db, server.id);
    return result;
  }

  /**
   * Servers whose latest drift is among the newest `limit`, newest first (the /drift page): per
   * changed tool part the hashes before and after and, when both texts are stored, a line diff
   * of the readable text; added and removed tools with their parts' text. The texts are the
   * servers' own, so what one call reads and shows is bounded (DRIFT_PAGE_LIMITS and
   * DIFF_DISPLAY_LIMITS), newest drift first: the tools detailed per drift, the bytes of text
   * read (per part and in all), the LCS cells compared and the characters shown.
   */
  async function computeDriftViews(limit: number) {
    const store = driftStore(db);
    const per = DRIFT_PAGE_LIMITS.toolsPerDrift;
    const rows = await store.recentDrifts(limit, per);
    const shown = rows.map((r) => {
      const changed = r.changes.changed.slice(0, per);
      const added = r.changes.added.slice(0, per - changed.length);
      const removed = r.changes.removed.slice(0, per - changed.length - added.length);
      return { changed, added, removed, more: r.counts.added + r.counts.removed + r.counts.changed - changed.length - added.length - removed.length };
    });
    const hashes = await store.toolHashes(
      rows.flatMap((r) => (r.previous_baseline_id ? [r.baseline_id, r.previous_baseline_id] : [r.baseline_id])),
      shown.flatMap((x) => [...x.changed.map((c) => c.name), ...x.added, ...x.removed]),
    );
    const toolsOf = (baselineId: string | null) => new Map((baselineId ? (hashes.get(baselineId) ?? []) : []).map((t) => [t.name, t]));
    // The context changes of each drift, as many entries as its tools leave of DRIFT_PAGE_LIMITS.toolsPerDrift.
    const shownContext = rows.map((r, k) => {
      const d = r.context_changes;
      const entries: { part: ContextListPart; change: 'added' | 'removed' | 'changed'; key: string; changes: string[] }[] = [];
      let total = 0;
      if (d) {
        for (const part of CONTEXT_LIST_PARTS) {
          const c = r.context_counts?.[part];
          total += c ? c.added + c.removed + c.changed : 0;
          for (const x of d[part]?.changed ?? []) entries.push({ part, change: 'changed', key: x.key, changes: x.changes });
          for (const key of d[part]?.added ?? []) entries.push({ part, change: 'added', key, changes: [] });
          for (const key of d[part]?.removed ?? []) entries.push({ part, change: 'removed', key, changes: [] });
        }
      }
      const room = Math.max(1, per - shown[k]!.changed.length - shown[k]!.added.length - shown[k]!.removed.length);
      const kept = entries.slice(0, room);
      return { instructions: d?.instructions === true, entries: kept, more: total - kept.length };
    });
    const listHash = (c: BaselineContext | null, part: ContextListPart) => c?.[part]?.hash ?? null;
    const items = await store.contextItems(
      rows.flatMap((r) => CONTEXT_LIST_PARTS.flatMap((p) => [listHash(r.context, p), listHash(r.prev_context, p)])).filter((h): h is string => h !== null),
      shownContext.flatMap((x) => x.entries.map((e) => e.key)),
    );
    const itemsOf = (c: BaselineContext | null, part: ContextListPart) => new Map((items.get(listHash(c, part) ?? '') ?? []).map((i) => [i.key, i]));
    const views = rows.map((r, k) => ({
      r,
      shown: shown[k]!,
      before: toolsOf(r.previous_baseline_id),
      after: toolsOf(r.baseline_id),
      ctx: shownContext[k]!,
      ctxBefore: Object.fromEntries(CONTEXT_LIST_PARTS.map((p) => [p, itemsOf(r.prev_context, p)])) as Record<ContextListPart, Map<string, ContextItemHashes>>,
      ctxAfter: Object.fromEntries(CONTEXT_LIST_PARTS.map((p) => [p, itemsOf(r.context, p)])) as Record<ContextListPart, Map<string, ContextItemHashes>>,
    }));
    const itemParts = (part: ContextListPart) => Object.values(CONTEXT_ITEM_SHAPES[part].fields) as string[];
    // Texts in the order the page shows them, read while the page's allowance lasts.
    const wanted: string[] = [];
    for (const { r, shown: x, before, after, ctx, ctxBefore, ctxAfter } of views) {
      for (const c of x.changed) for (const part of c.changes) wanted.push(before.get(c.name)?.[part] ?? '', after.get(c.name)?.[part] ?? '');
      for (const n of x.added) wanted.push(...TOOL_PARTS.map((p) => after.get(n)?.[p] ?? ''));
      for (const n of x.removed) wanted.push(...TOOL_PARTS.map((p) => before.get(n)?.[p] ?? ''));
      if (ctx.instructions) wanted.push(r.prev_context?.instructions?.hash ?? '', r.context?.instructions?.hash ?? '');
      for (const e of ctx.entries) {
        if (e.change === 'changed') for (const part of e.changes) wanted.push(ctxBefore[e.part].get(e.key)?.parts[part] ?? '', ctxAfter[e.part].get(e.key)?.parts[part] ?? '');
        else wanted.push(...itemParts(e.part).map((p) => (e.change === 'added' ? ctxAfter : ctxBefore)[e.part].get(e.key)?.parts[p] ?? ''));
      }
    }
    const sizes = await store.textSizes(wanted.filter(Boolean));
    const toRead = new Set<string>();
    let readLeft = DRIFT_PAGE_LIMITS.pageTextBytes;
    for (const h of wanted) {
      const bytes = sizes.get(h);
      if (bytes === undefined || bytes > DRIFT_PAGE_LIMITS.partTextBytes || toRead.has(h) || bytes > readLeft) continue;
      toRead.add(h);
      readLeft -= bytes;
    }
    const texts = await store.texts([...toRead]);
    /** What the page can show of a part: its readable text, or why not. */
    const textOf = (hash: string | null | undefined): string | NotShown => {
      const bytes = hash ? sizes.get(hash) : undefined;
      if (!hash || bytes === undefined) return { kind: 'unknown' };
      if (bytes > DRIFT_PAGE_LIMITS.partTextBytes) return { kind: 'too_long', bytes };
      const canonical = texts.get(hash);
      return canonical === undefined ? { kind: 'over_page' } : readablePart(canonical);
    };
    const budget = newDisplayBudget();
    const whole = (op: '+' | '-', text: string): ShownPart => ({ kind: 'lines', ...clipForDisplay(splitLines(text).map((t): DiffLine => ({ op, text: t })), budget) });
    /** A changed part: the line diff of its two texts, or why not. */
    const changedText = (b: string | null, a: string | null): ShownPart => {
      const bt = textOf(b);
      const at = textOf(a);
      return typeof bt === 'string' && typeof at === 'string'
        ? { kind: 'lines', ...clipForDisplay(withContext(diffLines(splitLines(bt), splitLines(at), budget)), budget) }
        : whyNotShown(bt, at);
    };
    // Parts the tool does not have (their canonical text is null, readable as '') are left out.
    const toolText = (op: '+' | '-', t: ToolHashes | undefined) =>
      TOOL_PARTS.map((part) => ({ part, text: textOf(t?.[part]) }))
        .filter((p) => p.text !== '')
        .map(({ part, text }) => ({ part, text: typeof text === 'string' ? whole(op, text) : text }));
    return views.map(({ r, shown: x, before, after, ctx, ctxBefore, ctxAfter }) => ({
      serverUrl: r.url,
      name: r.name,
      slug: r.slug,
      baselineId: r.baseline_id,
      baselineAt: r.recorded_at,
      previousBaselineAt: r.prev_recorded_at,
      toolCount: r.tool_count,
      receiptId: r.receipt_id,
      /** Tools of this drift not detailed here (over DRIFT_PAGE_LIMITS.toolsPerDrift). */
      moreTools: x.more,
      added: x.added.map((name) => ({ name, parts: toolText('+', after.get(name)) })),
      removed: x.removed.map((name) => ({ name, parts: toolText('-', before.get(name)) })),
      changed: x.changed.map((c) => ({
        name: c.name,
        parts: c.changes.map((part) => {
          const b = before.get(c.name)?.[part] ?? null;
          const a = after.get(c.name)?.[part] ?? null;
          const bt = textOf(b);
          const at = textOf(a);
          const diff: ShownPart =
            typeof bt === 'string' && typeof at === 'string'
              ? { kind: 'lines', ...clipForDisplay(withContext(diffLines(splitLines(bt), splitLines(at), budget)), budget) }
              : whyNotShown(bt, at);
          return { part, before: b, after: a, diff };
        }),
      })),
      /** What changed of the server's context (null: nothing did): its instructions, and the prompts, resources and templates shown. */
      context: r.context_changes
        ? {
            instructions: ctx.instructions
              ? { before: r.prev_context?.instructions?.hash ?? null, after: r.context?.instructions?.hash ?? null, diff: changedText(r.prev_context?.instructions?.hash ?? null, r.context?.instructions?.hash ?? null) }
              : null,
            entries: ctx.entries.map((e) => {
              const b = ctxBefore[e.part].get(e.key);
              const a = ctxAfter[e.part].get(e.key);
              if (e.change === 'changed') {
                return { part: e.part, change: e.change, key: e.key, parts: e.changes.map((p) => ({ part: p, before: b?.parts[p] ?? null, after: a?.parts[p] ?? null, diff: changedText(b?.parts[p] ?? null, a?.parts[p] ?? null) })) };
              }
              const op = e.change === 'added' ? '+' : '-';
              const item = e.change === 'added' ? a : b;
              const parts = itemParts(e.part)
                .map((p) => ({ part: p, hash: item?.parts[p] ?? null, text: textOf(item?.parts[p]) }))
                .filter((p) => p.text !== '')
                .map((p) => ({ part: p.part, before: e.change === 'removed' ? p.hash : null, after: e.change === 'added' ? p.hash : null, diff: typeof p.text === 'string' ? whole(op, p.text) : p.text }));
              return { part: e.part, change: e.change, key: e.key, parts };
            }),
            /** Entries of this drift not detailed here. */
            more: ctx.more,
          }
        : null,
    }));
  }
  // One page of drifts costs up to DRIFT_PAGE_LIMITS of reading and comparing: computed at most
  // once per SCORE_CACHE_MS and shared (served up to RANKED_STALE_MS old while one refresh runs).
  // A drift recorded here settles it like the trust figures (touch, not drop): a list begun before
  // is served until AGGREGATE_SETTLE_MS after its beginning, so drifts recorded as fast as anyone
  // can make them cost at most one computation per AGGREGATE_SETTLE_MS, not one per drift. The
  // /drift form, which links to the drift its check just recorded, asks for a list begun after it.
  const driftViews = cachedFigures((limit) => computeDriftViews(Number(limit)), { freshMs: SCORE_CACHE_MS, staleMs: RANKED_STALE_MS });
  onDriftRecorded(db, () => driftViews.touch());

  // Once a day across instances: drop tool lists and texts no reader needs (driftStore.collectGarbage),
  // keeping a day's margin for baselines being recorded meanwhile.
  const storageJob = periodicJob(db, 'drift-storage', DRIFT_STORAGE_PERIOD_MS, now, (at) => driftStore(db).collectGarbage(new Date(at.getTime() - DRIFT_STORAGE_PERIOD_MS)), {
    onError: deps.onBackgroundError,
  });

  return {
    /** The daily drift storage job (tick it directly with a fixed clock in tests). */
    storageJob,
    /** Stops the storage job's timer. */
    close(): void {
      storageJob.stop();
    },

    async getDrift(req: Partial<GetDriftRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetDriftResponseSchema>> {
      const target = (req.server ?? '').trim();
      if (target === '') throw invalidArgument('server is required');
      const server = await servers.resolve(target);
      if (!server) throw notTracked(target);

      let probed;
      try {
        // The catalogue's transport when it knows one; otherwise the probe finds out (Streamable HTTP, then SSE).
        const transport = (await servers.catalogue(server.id))?.transport === 'sse' ? ('sse' as const) : undefined;
        probed = await probeSlots.run(ctx, () => mcpProbe.probe(server, { transport }));
      } catch (err) {
        throw probeError(err);
      }
      const { manifest, view } = probed;
      const b = await recordBaseline(server, manifest);
      const prevContext = b.previous?.context ?? null;
      const changedParts = new Set(b.contextDrift ? changedContextParts(b.contextDiff) : []);
      return {
        serverUrl: server.url,
        name: server.name,
        baselineId: b.baselineId,
        baselineAt: b.recordedAt.toISOString(),
        previousBaselineAt: b.previous ? b.previous.recorded_at.toISOString() : undefined,
        driftDetected: b.driftDetected,
        toolsAdded: b.diff.added,
        toolsRemoved: b.diff.removed,
        toolsChanged: b.diff.changed.map((c) => ({ name: c.name, changes: c.changes })),
        toolCount: b.toolCount,
        previousToolCount: b.previous ? b.previous.tool_count : undefined,
        manifestHash: b.manifestHash,
        previousManifestHash: b.previous?.manifest_hash,
        receiptId: b.receiptId,
        receipt: b.receipt ?? '',
        protocolVersion: manifest.protocol_version,
        transport: manifest.transport,
        serverCard: view.serverCard ?? undefined,
        contextDriftDetected: b.contextDrift,
        contextChanges: b.contextDrift ? contextChangeEntries(b.contextDiff) : [],
        context: CONTEXT_PARTS.map((part) => {
          const c = b.context[part];
          return {
            part,
            status: c.status,
            hash: c.hash ?? undefined,
            previousHash: prevContext?.[part]?.hash ?? undefined,
            count: c.count ?? undefined,
            detail: c.detail ?? undefined,
            changed: changedParts.has(part),
          };
        }),
        contextHash: contextHashOf(b.context),
        previousContextHash: prevContext ? contextHashOf(prevContext) : undefined,
      };
    },

    recordBaseline,

    /**
     * The newest drifts (the /drift page), computed at most once per AGGREGATE_SETTLE_MS while
     * drifts are recorded here; `notBefore` (a performance.now() time) asks for a list begun after
     * it, for a caller that has just recorded a drift it must show.
     */
    listDrifts(limit = 50, notBefore?: number) {
      return driftViews.get(String(Math.min(Math.max(1, limit), 200)), now(), notBefore);
    },

    /** Every server's latest baseline, newest first (the /drift page). */
    async listBaselines(limit = 100) {
      const rows = await driftStore(db).latestBaselines(Math.min(Math.max(1, limit), 500));
      return rows.map((r) => ({ serverUrl: r.url, name: r.name, slug: r.slug, baselineAt: r.recorded_at, toolCount: r.tool_count, manifestHash: r.manifest_hash, driftDetected: r.drift_detected, receiptId: r.receipt_id }));
    },

    /** Active drift anomaly flags of a tracked server (see toolManifestDriftFlags). */
    activeFlags(serverId: number): Promise<string[]> {
      return toolManifestDriftFlags(db, serverId, now());
    },
  };
}

export type DriftService = ReturnType<typeof createDriftService>;
