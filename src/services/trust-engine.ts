// The trust engine: gathers a server's rollups, runs the pure model (src/domain) and keeps the
// score cache and hourly snapshots up to date. Every read of a score goes through here.
import { staleReads, type Queryable } from '../db/index.js';
import { detectAnomaliesRobust, hourStart, HISTORY_HOURS, HOUR_MS, RECENT_HOURS, type AnomalyResult } from '../domain/anomaly.js';
import { robustCategoryBaseline, robustServerFigures, type CategoryBaselineValue } from '../domain/baseline.js';
import { computeTrustScore, type Breakdown } from '../domain/scoring.js';
import { verdictFor, type PreflightVerdict } from '../domain/verdict.js';
import { scoreStore, type RankedServer } from '../store/scores.js';
import { serverStore, type ServerRow } from '../store/servers.js';
import { onTelemetryCommitted, type StoredTotals } from '../store/telemetry.js';
import { BoundedMap } from '../store/cache-limits.js';
import { categoryMembers, scoreInputs, type ScoreInputs } from '../store/score-inputs.js';
import { cachedFigures } from './cached-figure.js';

/** A cached score older than this is recomputed on the next read even without new reports. */
export const SCORE_MAX_AGE_MS = 5 * 60_000;

/**
 * Computed scores are kept in memory at most this long (wall time and service clock both). New evidence
 * for a server committed by this process drops its entry at once; what this bound covers is
 * evidence written by another process (several instances on one PostgreSQL) and the category
 * baseline, which moves with the other servers of the category.
 */
export const SCORE_CACHE_MS = 2000;
/**
 * A ranked list (leaderboard, stats, pages) past SCORE_CACHE_MS is still served, while one
 * refresh runs in the background, until it is this old: at 100,000 servers reading the list takes
 * hundreds of milliseconds, and every reader waiting for it would make each page pay it (issue
 * 23). Only the time bound is relaxed: evidence committed (here, or announced by another instance)
 * shows in every list within AGGREGATE_SETTLE_MS (cached-figure.ts); what another instance wrote
 * without announcing it shows after at most this long.
 */
export const RANKED_STALE_MS = 30_000;
/**
 * A category baseline is recomputed at most this often unless evidence is committed (by this
 * process, or by another instance, which tells this one over LISTEN/NOTIFY on PostgreSQL: both
 * make it recomputed once it is AGGREGATE_SETTLE_MS old). Its inputs otherwise change only by time decay (a 168-hour half
 * life: nothing in 30 s), and at 100,000 servers one recomputation reads every rated server of
 * the category, a fixed cost that recomputing every SCORE_CACHE_MS put on the request path of
 * cache misses (issue 23). Past it, the baseline is served for as long again while one refresh
 * runs in the background.
 */
export const BASELINE_CACHE_MS = 30_000;
/**
 * A computation whose result equals the stored one (same score, verdict, flags, report count and
 * hour) is not written again within this long: reads recompute a busy server every
 * SCORE_CACHE_MS, and rewriting an identical row each time would make reads cost writes. Far
 * below SCORE_MAX_AGE_MS, so the stored row never looks stale because of it.
 */
const SCORE_RESAVE_MS = 60_000;

export interface ComputedScore {
  server: ServerRow;
  trust_score: number;
  /** UNRATED when the server has no accepted report. */
  verdict: PreflightVerdict;
  breakdown: Breakdown;
  anomaly: AnomalyResult;
  totals: StoredTotals | null;
  baseline: CategoryBaselineValue;
  computed_at: Date;
}

/** What other services need to know about a server's standing, cheaply (from the cache when fresh). */
export interface ScoreSummary {
  trust_score: number;
  verdict: PreflightVerdict;
  total_interactions: number;
  anomaly_flags: string[];
  computed_at: Date;
}

interface MemoEntry {
  summary: ScoreSummary;
  /** The full computation when this entry came from one (getTrust needs it). */
  full: ComputedScore | null;
  category: string;
  /** Service clock and monotonic time of the entry. */
  at: number;
  mono: number;
}

/** The ranked index's key for "every category". */
const ALL = '\u0000all';

export function createTrustEngine(db: Queryable) {
  const scores = scoreStore(db);
  // Ranked lists tolerate the staleness bound: a read replica when configured (DATABASE_READ_URL).
  const staleScores = scoreStore(staleReads(db));

  // In-memory score cache (see SCORE_CACHE_MS). `generation` counts invalidations per server so a
  // computation that started before new evidence committed is never cached as current.
  // Every per-server and per-category cache here is a BoundedMap (CACHE_MAX_ENTRIES, oldest first).
  // An evicted generation reads as 0 again; a computation it guards is kept at most SCORE_CACHE_MS.
  const memo = new BoundedMap<number, MemoEntry>();
  const generation = new BoundedMap<number, number>();
  const pending = new Map<number, { gen: number; at: number; p: Promise<ComputedScore> }>();
  // Ranked lists (leaderboard, stats, tiers) per category: SCORE_CACHE_MS, served while one
  // refresh runs up to RANKED_STALE_MS (see there); evidence committed shows within
  // AGGREGATE_SETTLE_MS (cached-figure.ts).
  const rankedIndex = cachedFigures<RankedIndex>((key, at) => computeIndex(key === ALL ? null : key, at), { freshMs: SCORE_CACHE_MS, staleMs: RANKED_STALE_MS });
  // Category baselines (BASELINE_CACHE_MS), shared by every server of the category computed
  // meanwhile. Past their bound only they are served while one refresh runs in the background, up
  // to twice the bound old, like the ranked lists: at 100,000 servers a baseline reads every rated
  // server of its category, and every miss would otherwise wait for it. Evidence committed shows
  // in them within AGGREGATE_SETTLE_MS.
  const baselineFigures = cachedFigures<CategoryBaselineValue>((category, at) => computeBaseline(category, at), { freshMs: BASELINE_CACHE_MS, staleMs: 2 * BASELINE_CACHE_MS });
  // What was last written to server_scores per server (see SCORE_RESAVE_MS).
  // `saved` settles when that write committed: a computation that skips an identical write waits
  // for it, so a ranked read after it never misses a row another computation is still writing.
  const lastSaved = new BoundedMap<number, { key: string; bucket: number; at: number; mono: number; saved: Promise<void> }>();
  // Servers without evidence per category, counted once for every category's list (one GROUP BY
  // over the catalogue instead of one per category per SCORE_CACHE_MS; issue 23). Keyed by the
  // handle read ('primary' after this process wrote scores, else 'stale'); dropped with the lists.
  const unratedByCategory = cachedFigures((key) => (key === 'primary' ? scores : staleScores).unratedCounts(null), { freshMs: SCORE_CACHE_MS });
  // New evidence (committed here, announced by another instance, folded, or a catalogue change):
  // the servers' own scores are dropped at once (read-your-writes); the whole-index figures
  // follow within AGGREGATE_SETTLE_MS, so continuous writes do not make every read recompute them.
  onTelemetryCommitted(db, (ids) => {
    unratedByCategory.touch();
    rankedIndex.touch();
    baselineFigures.touch();
    categoryCountFigures.touch();
    for (const id of ids) {
      memo.delete(id);
      generation.set(id, (generation.get(id) ?? 0) + 1);
    }
  });
  const genOf = (id: number) => generation.get(id) ?? 0;

  function memoHit(server: ServerRow, at: Date): MemoEntry | null {
    const e = memo.get(server.id);
    if (!e || e.category !== server.category) return null;
    const age = at.getTime() - e.at;
    if (age < 0 || age >= SCORE_CACHE_MS || performance.now() - e.mono >= SCORE_CACHE_MS) return null;
    return e;
  }

  function remember(server: ServerRow, gen: number, at: Date, summary: ScoreSummary, full: ComputedScore | null): void {
    if (genOf(server.id) !== gen) return;
    memo.set(server.id, { summary, full, category: server.category, at: at.getTime(), mono: performance.now() });
  }

  const summaryOf = (s: ComputedScore): ScoreSummary => ({
    trust_score: s.trust_score,
    verdict: s.verdict,
    total_interactions: s.totals?.n ?? 0,
    anomaly_flags: s.anomaly.flags,
    computed_at: s.computed_at,
  });

  // Tracked servers per category (every baseline states its category's): one count of the whole
  // servers table (a scan, tens of milliseconds at 100,000 servers), kept up to RANKED_STALE_MS
  // like the ranked lists (a new server reported shows within AGGREGATE_SETTLE_MS); concurrent
  // callers share one count.
  const categoryCountFigures = cachedFigures(() => serverStore(db).countsByCategory(), { freshMs: RANKED_STALE_MS });
  const categoryCounts = (at: Date) => categoryCountFigures.get('all', at);

  // Baselines asked for in the same event-loop turn (every category's expires together) read
  // their members in one statement (categoryMembers) and share one count of every category.
  let baseBatch: { category: string; at: Date; resolve: (v: CategoryBaselineValue) => void; reject: (err: unknown) => void }[] = [];
  let baseScheduled = false;
  function computeBaseline(category: string, at: Date): Promise<CategoryBaselineValue> {
    return new Promise((resolve, reject) => {
      baseBatch.push({ category, at, resolve, reject });
      if (baseScheduled) return;
      baseScheduled = true;
      setImmediate(() => {
        baseScheduled = false;
        const items = baseBatch;
        baseBatch = [];
        const latest = new Date(Math.max(...items.map((i) => i.at.getTime())));
        Promise.all([categoryMembers(db, [...new Set(items.map((i) => i.category))]), categoryCounts(latest)]).then(
          async ([members, counts]) => {
            // One category per event-loop turn: at 100,000 servers every category's baseline
            // expires together and computing them all at once held every other request for tens
            // of milliseconds (the cache-miss p95 at that size).
            for (let k = 0; k < items.length; k++) {
              const i = items[k]!;
              if (k > 0) await new Promise((r) => setImmediate(r));
              try {
                const figures = (members.get(i.category) ?? []).map((m) => robustServerFigures(m.evidence, m.totals.hist, i.at));
                i.resolve(robustCategoryBaseline(i.category, figures, counts.get(i.category) ?? 0));
              } catch (err) {
                i.reject(err);
              }
            }
          },
          (err: unknown) => items.forEach((i) => i.reject(err)),
        );
      });
    });
  }

  /** Category baselines from source-robust per-server figures as of `at` (docs/integrity.md). */
  async function baselines(categories: Iterable<string>, at: Date): Promise<Map<string, CategoryBaselineValue>> {
    const list = [...new Set(categories)];
    const values = await Promise.all(list.map((c) => baselineFigures.get(c, at)));
    return new Map(list.map((c, i) => [c, values[i]!]));
  }

  /** The hourly rollups a computation as of `at` reads start here. */
  const historyFrom = (at: Date) => new Date(hourStart(at) - (HISTORY_HOURS + RECENT_HOURS) * HOUR_MS);

  /**
   * Computes the scores of the given servers as of `at` and records them (cache and snapshot).
   * `pre`: their inputs as of `at`, already read (scoreInputs); otherwise read here, in one statement.
   */
  async function compute(servers: readonly ServerRow[], at: Date, pre?: Map<number, ScoreInputs>): Promise<Map<number, ComputedScore>> {
    const ids = servers.map((s) => s.id);
    const [inputs, base] = await Promise.all([pre ?? scoreInputs(db, ids, historyFrom(at), at), baselines(servers.map((s) => s.category), at)]);
    const out = new Map<number, ComputedScore>();
    for (const server of servers) {
      const input = inputs.get(server.id);
      const t = input?.totals ?? null;
      const baseline = base.get(server.category)!;
      const anomaly = detectAnomaliesRobust(input?.hourly ?? [], at);
      const { trust_score, breakdown } = computeTrustScore({
        sources: input?.evidence ?? [],
        baselineLatencyMs: baseline.avg_latency_ms,
        anomalyFlags: anomaly.flags,
        now: at,
      });
      const verdict: PreflightVerdict = t && t.n > 0 ? verdictFor(trust_score) : 'UNRATED';
      out.set(server.id, { server, trust_score, verdict, breakdown, anomaly, totals: t, baseline, computed_at: at });
    }
    const mono = performance.now();
    const earlier: Promise<void>[] = [];
    const entries: { key: string; bucket: number; at: number; mono: number; saved: Promise<void> }[] = [];
    // Only scores with evidence are stored: a server without reports is UNRATED (ranked lists
    // read n = 0 as unrated), and writing a row and an hourly snapshot for each of a catalogue's
    // 100,000 unobserved servers would turn every read of one into writes (issue 23).
    const rows = [...out.values()].flatMap((c) => {
      if (!c.totals || c.totals.n <= 0) return [];
      const bucket = hourStart(at);
      const key = `${c.trust_score}|${c.verdict}|${c.anomaly.flags.join(',')}|${c.totals?.n ?? 0}`;
      const prev = lastSaved.get(c.server.id);
      if (prev && prev.key === key && prev.bucket === bucket && at.getTime() >= prev.at && at.getTime() - prev.at < SCORE_RESAVE_MS && mono - prev.mono < SCORE_RESAVE_MS) {
        earlier.push(prev.saved);
        return [];
      }
      const entry = { key, bucket, at: at.getTime(), mono, saved: Promise.resolve() };
      lastSaved.set(c.server.id, entry);
      entries.push(entry);
      return [
        {
          server_id: c.server.id,
          trust_score: c.trust_score,
          verdict: c.verdict,
          anomaly_flags: c.anomaly.flags,
          evidence_reports: c.totals?.n ?? 0,
          computed_at: at,
          bucket: new Date(bucket),
        },
      ];
    });
    const save = scores.save(rows);
    const settled = save.then(
      () => undefined,
      () => undefined,
    );
    for (const e of entries) e.saved = settled;
    try {
      await save;
    } catch (err) {
      for (const r of rows) if (lastSaved.get(r.server_id)?.saved === settled) lastSaved.delete(r.server_id);
      throw err;
    }
    // Identical rows written by a computation still in flight: committed before this one returns.
    await Promise.all(earlier);
    return out;
  }

  /** A stored score that is still current (SCORE_MAX_AGE_MS, and no report since) as a summary; else null. */
  function storedSummary(input: ScoreInputs | undefined, at: Date): ScoreSummary | null {
    const c = input?.stored;
    const n = input?.totals?.n ?? 0;
    if (!c || c.computed_at.getTime() < at.getTime() - SCORE_MAX_AGE_MS || c.evidence_reports !== n) return null;
    return { trust_score: c.trust_score, verdict: c.verdict as PreflightVerdict, total_interactions: n, anomaly_flags: c.anomaly_flags, computed_at: c.computed_at };
  }

  // Misses of different servers arriving in the same event-loop turn are served together: one
  // statement reads the inputs of all of them (scoreInputs), as of the latest of their times (at
  // most a loop turn apart); a summary (scoreFor) comes from the stored score when it is current,
  // everything else is computed from the inputs just read (issue 23: a miss is one round trip).
  type BatchResult = { full: ComputedScore; summary: ScoreSummary } | { full: null; summary: ScoreSummary };
  let batch: { server: ServerRow; at: Date; summaryOnly: boolean; resolve: (r: BatchResult) => void; reject: (err: unknown) => void }[] = [];
  let batchScheduled = false;

  async function runBatch(items: typeof batch): Promise<Map<number, BatchResult>> {
    const servers = new Map(items.map((i) => [i.server.id, i.server]));
    const latest = new Date(Math.max(...items.map((i) => i.at.getTime())));
    // A full computation needs its category's baseline: asked for now, so it is read (when not
    // in memory) while the inputs are.
    const full = items.filter((i) => !i.summaryOnly);
    const early = full.length > 0 ? baselines(full.map((i) => i.server.category), latest) : null;
    early?.catch(() => {});
    const inputs = await scoreInputs(db, [...servers.keys()], historyFrom(latest), latest);
    const out = new Map<number, BatchResult>();
    const needFull = new Set(full.map((i) => i.server.id));
    for (const i of items) {
      if (!i.summaryOnly || out.has(i.server.id)) continue;
      const summary = storedSummary(inputs.get(i.server.id), latest);
      if (summary) out.set(i.server.id, { full: null, summary });
      else needFull.add(i.server.id);
    }
    if (needFull.size > 0) {
      const computed = await compute(
        [...needFull].map((id) => servers.get(id)!),
        latest,
        inputs,
      );
      for (const [id, c] of computed) out.set(id, { full: c, summary: summaryOf(c) });
    }
    return out;
  }

  function computeSoon(server: ServerRow, at: Date, summaryOnly: boolean): Promise<BatchResult> {
    return new Promise((resolve, reject) => {
      batch.push({ server, at, summaryOnly, resolve, reject });
      if (batchScheduled) return;
      batchScheduled = true;
      setImmediate(() => {
        batchScheduled = false;
        const items = batch;
        batch = [];
        runBatch(items).then(
          (m) => items.forEach((i) => i.resolve(m.get(i.server.id)!)),
          (err: unknown) => items.forEach((i) => i.reject(err)),
        );
      });
    });
  }

  /** A full, current computation of one server: from memory when fresh, computed once for concurrent callers otherwise. */
  function current(server: ServerRow, at: Date): Promise<ComputedScore> {
    const hit = memoHit(server, at);
    if (hit?.full) return Promise.resolve(hit.full);
    const gen = genOf(server.id);
    const inflight = pending.get(server.id);
    if (inflight && inflight.gen === gen && Math.abs(inflight.at - at.getTime()) < SCORE_CACHE_MS) return inflight.p;
    const p = computeSoon(server, at, false)
      .then((r) => {
        const c = r.full!;
        remember(server, gen, c.computed_at, r.summary, c);
        return c;
      })
      .finally(() => {
        if (pending.get(server.id)?.p === p) pending.delete(server.id);
      });
    pending.set(server.id, { gen, at: at.getTime(), p });
    return p;
  }

  /** Recomputes every stale cached score (new reports, or older than SCORE_MAX_AGE_MS). */
  async function refresh(at: Date): Promise<number> {
    const stale = new Set(await scores.staleServerIds(new Date(at.getTime() - SCORE_MAX_AGE_MS)));
    if (stale.size === 0) return 0;
    const rows = await scores.serverRows([...stale]);
    // Batches keep each statement's arrays and result sets small on large indexes.
    for (let i = 0; i < rows.length; i += 500) await compute(rows.slice(i, i + 500), at);
    return rows.length;
  }

  /** The ranked list of `category` (null: all): refreshes stale scores, then reads. */
  async function computeIndex(category: string | null, at: Date): Promise<RankedIndex> {
    // Scores this call just wrote are read back from the primary (read-your-writes); otherwise
    // the list tolerates the staleness bound and may come from a read replica.
    const refreshed = await refresh(at);
    const src = refreshed > 0 ? scores : staleScores;
    const [ranked, unratedAll] = await Promise.all([src.ranked(category), unratedByCategory.get(src === scores ? 'primary' : 'stale', at)]);
    const unrated = category === null ? unratedAll : unratedAll.filter((c) => c.category === category);
    return { rows: ranked, unrated, unratedTotal: unrated.reduce((a, c) => a + c.servers, 0) };
  }

  return {
    compute,
    baselines,
    current,

    refresh,

    /**
     * Recomputes only the cached scores that new evidence made stale (no cached score yet, or
     * reports since it was computed), not those that merely aged: what a reader of the whole
     * cache (the offline bundle) needs to state what pre-flight would, at the cost of the servers
     * that changed. Time decay is the periodic refresh's work. Returns how many were computed.
     */
    async refreshNewEvidence(at: Date): Promise<number> {
      const ids = await scores.staleServerIds(new Date(0));
      if (ids.length === 0) return 0;
      const rows = await serverStore(db).byIds(ids);
      for (let i = 0; i < rows.length; i += 500) await compute(rows.slice(i, i + 500), at);
      return rows.length;
    },

    /** The ranked servers with evidence (rated), highest score first; see index. */
    async ranked(category: string | null, at: Date): Promise<RankedServer[]> {
      return (await this.index(category, at)).rows;
    },

    /**
     * Fresh ranked list of the servers with evidence and the count of those without per category
     * (kept SCORE_CACHE_MS in memory, see RANKED_STALE_MS and AGGREGATE_SETTLE_MS).
     */
    async index(category: string | null, at: Date): Promise<RankedIndex> {
      return rankedIndex.get(category ?? ALL, at);
    },

    /**
     * A server's current score and verdict, from the cache when it is fresh; otherwise one read
     * (batched with concurrent misses) gives the stored score when it is current, or the inputs
     * it is computed from.
     */
    async scoreFor(server: ServerRow, at: Date): Promise<ScoreSummary> {
      const hit = memoHit(server, at);
      if (hit) return hit.summary;
      const gen = genOf(server.id);
      // A full computation of this server already under way answers this too.
      const inflight = pending.get(server.id);
      if (inflight && inflight.gen === gen && Math.abs(inflight.at - at.getTime()) < SCORE_CACHE_MS) return summaryOf(await inflight.p);
      const r = await computeSoon(server, at, true);
      if (r.full) remember(server, gen, r.full.computed_at, r.summary, r.full);
      else remember(server, gen, at, r.summary, null);
      return r.summary;
    },
  };
}

/** The ranked servers with evidence, and how many tracked servers have none, per category. */
export interface RankedIndex {
  rows: RankedServer[];
  unrated: { category: string; servers: number }[];
  unratedTotal: number;
}

export function serverRowOf(r: RankedServer): ServerRow {
  return { id: r.id, url: r.url, name: r.name, slug: r.slug, category: r.category, registered_at: r.registered_at };
}

export type TrustEngine = ReturnType<typeof createTrustEngine>;
