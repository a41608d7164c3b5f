import type { MessageInitShape } from '@bufbuild/protobuf';
import { makeBadge } from 'badge-maker';
import type {
  GetBadgeRequest,
  GetBadgeResponseSchema,
  GetBenchmarkRequest,
  GetBenchmarkResponseSchema,
  GetLeaderboardRequest,
  GetLeaderboardResponseSchema,
  GetSlaTierRequest,
  GetSlaTierResponseSchema,
  GetStatsRequest,
  GetStatsResponseSchema,
  GetTrustDeltaRequest,
  GetTrustDeltaResponseSchema,
  GetTrustRequest,
  GetTrustResponseSchema,
} from '../../gen/observatory/v1/trust_pb.js';
import { latencyP95 } from '../domain/latency-histogram.js';
import { canonicalServerUrl, InvalidServerUrl } from '../domain/server-identity.js';
import { DEFAULT_DELTA_WINDOW, DELTA_WINDOWS, groupDeltas, isDeltaWindow, reliabilityTrend } from '../domain/trend.js';
import { gradeFor, SLA_MIN_INTERACTIONS_30D, slaTierFor, type PreflightVerdict, type SlaTier } from '../domain/verdict.js';
import { invalidArgument, notTracked, ObservatoryError } from '../errors.js';
import { staleReads } from '../db/index.js';
import { marketStore, type MarketFigures } from '../store/market.js';
import { scoreStore, type RankedServer } from '../store/scores.js';
import { serverStore, type ServerRow } from '../store/servers.js';
import { rememberedHits } from '../store/server-cache.js';
import type { RegistryListingRow } from '../store/registry-sync.js';
import { telemetryStore } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { onDriftRecorded, serversWithDriftFlag } from './drift.js';
import { lookupUrlWithFacts, serverFacts } from './server-facts.js';
import { cachedFigures } from './cached-figure.js';
import { onTelemetryCommitted } from '../store/telemetry.js';
import { DRIFT_FLAG } from '../domain/drift.js';
import { decodeCursor, decodeListCursor, encodeCursor, encodeListCursor, filterSignature, indexAfter, InvalidCursor, LIST_VERDICTS, normaliseSearch, type RankKey } from '../domain/paging.js';
import { periodicJob } from './jobs.js';
import { listingMessage } from './registry-sync.js';
import type { McpTrustView, ServerCardCheck } from './mcp-probe.js';
import { createTrustEngine, RANKED_STALE_MS, SCORE_CACHE_MS, type ComputedScore, type RankedIndex, type ScoreSummary } from './trust-engine.js';
import { ruleViolations } from '../domain/contract-rules.js';
import { contractViolation } from './contract.js';
import { GetLeaderboardRequestSchema } from '../../gen/observatory/v1/trust_pb.js';

const DAY_MS = 86_400_000;
export const SLA_SCHEMA = 'mcp-sla-tier-certification-v1.0';
export const DELTA_SCHEMA = 'mcp-trust-delta-v1.0';
export const LEADERBOARD_DEFAULT_LIMIT = 20;
/** The trust delta's lists that page (GetTrustDeltaRequest.list) and their default page size. */
export const DELTA_LISTS = ['new', 'improved', 'degraded', 'at_risk'] as const;
export const DELTA_PAGE_DEFAULT = 100;
/** New servers without evidence listed by the trust delta (all are counted in summary.new_servers). */
export const NEW_SERVERS_LISTED = 1000;
/** `market_validation` counts whole tables; each instance recounts at most this often. */
export const MARKET_FIGURES_MS = 60_000;
/** Stale scores are recomputed (and snapshotted) at least this often. */
export const SNAPSHOT_INTERVAL_MS = 10 * 60_000;
const SLA_RULES: { tier: SlaTier; min: number }[] = [
  { tier: 'Platinum', min: 90 },
  { tier: 'Gold', min: 75 },
  { tier: 'Silver', min: 60 },
  { tier: 'Bronze', min: 40 },
  { tier: 'Unrated', min: 0 },
];
const SLA_CRITERIA = {
  tiers: SLA_RULES.map((r) => ({ tier: r.tier, minTrustScore: r.min })),
  minInteractions30d: SLA_MIN_INTERACTIONS_30D,
  description: `Platinum >= 90, Gold >= 75, Silver >= 60, Bronze >= 40; Unrated below 40 or with fewer than ${SLA_MIN_INTERACTIONS_30D} interactions in the last 30 days`,
};
const BADGE_COLORS: Record<PreflightVerdict, string> = { PASS: 'brightgreen', UNCERTAIN: 'yellow', FAIL: 'red', UNRATED: 'lightgrey' };

/** Parses a required URL parameter into a canonical server URL or throws 400. */
export function requireServerUrl(value: string | undefined, param: string): string {
  if (value === undefined || value === '') throw invalidArgument(`${param} is required`);
  try {
    return canonicalServerUrl(value);
  } catch (err) {
    if (err instanceof InvalidServerUrl) throw invalidArgument(`${param}: ${err.message}`);
    throw err;
  }
}

/** A server is rated when it has runtime evidence (accepted reports) and a computed score. */
export const isRated = (r: Pick<RankedServer, 'n' | 'trust_score'>) => r.n > 0 && r.trust_score !== null;

export interface CategoryCoverage {
  name: string;
  servers: number;
  rated: number;
  unrated: number;
  interactions: number;
  /** Mean score of the rated servers; undefined when none is rated. */
  averageTrustScore: number | undefined;
}

export interface Coverage {
  at: Date;
  categories: CategoryCoverage[];
  totals: Omit<CategoryCoverage, 'name'>;
}

const mean1 = (sum: number, n: number) => (n > 0 ? Math.round((sum / n) * 10) / 10 : undefined);

/** Tracked / rated / unrated per category (most servers first, then by name) and in total. */
export function coverageOf(rows: readonly RankedServer[], unrated: readonly { category: string; servers: number }[] = []): Omit<Coverage, 'at'> {
  const cats = new Map<string, CategoryCoverage & { sum: number }>();
  const tot = { servers: 0, rated: 0, unrated: 0, interactions: 0, sum: 0 };
  // Servers without evidence arrive as counts per category (the ranked rows are the ones with evidence).
  for (const u of unrated) {
    let c = cats.get(u.category);
    if (!c) cats.set(u.category, (c = { name: u.category, servers: 0, rated: 0, unrated: 0, interactions: 0, averageTrustScore: undefined, sum: 0 }));
    for (const x of [c, tot]) {
      x.servers += u.servers;
      x.unrated += u.servers;
    }
  }
  for (const r of rows) {
    let c = cats.get(r.category);
    if (!c) cats.set(r.category, (c = { name: r.category, servers: 0, rated: 0, unrated: 0, interactions: 0, averageTrustScore: undefined, sum: 0 }));
    const n = Number(r.n);
    for (const x of [c, tot]) {
      x.servers++;
      x.interactions += n;
      if (isRated(r)) {
        x.rated++;
        x.sum += r.trust_score!;
      } else x.unrated++;
    }
  }
  const categories = [...cats.values()]
    .sort((a, b) => b.servers - a.servers || (a.name < b.name ? -1 : 1))
    .map(({ sum, ...c }) => ({ ...c, averageTrustScore: mean1(sum, c.rated) }));
  const { sum, ...totals } = tot;
  return { categories, totals: { ...totals, averageTrustScore: mean1(sum, totals.rated) } };
}

const rate = (s: number, n: number) => (n > 0 ? Math.round((s / n) * 10000) / 10000 : undefined);
const ms = (sum: number, n: number) => (n > 0 ? Math.round((sum / n) * 10) / 10 : undefined);

/** TrustService: THE implementation of the trust reads (REST, Connect, MCP and A2A call it). */
/** A page request of listServers (pages) and the leaderboard. */
interface ListOptions {
  category?: string | null;
  q?: string | null;
  verdict?: string | null;
  cursor?: string | null;
  limit: number;
  all?: boolean;
}

const listed = new WeakMap<object, { row: RegistryListingRow; res: MessageInitShape<typeof GetTrustResponseSchema> }>();

/** trust.scoreFor's answer per score summary (the engine hands out one summary object per computation). */
const scoreViews = new WeakMap<ScoreSummary, { mcp: unknown; listing: RegistryListingRow | null; value: ScoreSummary & { server_card: ServerCardCheck | null; protocol_version: string | null; listing: RegistryListingRow | null } }>();

/**
 * A trust answer with the server's registry listing spread onto it (answers are plain init
 * objects, never created messages). The same answer and listing row give the same object, so its
 * JSON text is built once (src/http/rest-json.ts) for a listed server too, not per read. A module
 * function, not a closure made per request: tsx (esbuild keepNames) names every such closure with
 * Object.defineProperty when it is created.
 */
function withListing(r: MessageInitShape<typeof GetTrustResponseSchema>, row: RegistryListingRow | null): MessageInitShape<typeof GetTrustResponseSchema> {
  if (!row) return r;
  const known = listed.get(r);
  if (known?.row === row) return known.res;
  const res = Object.assign({}, r, { registry: listingMessage(row) }) as MessageInitShape<typeof GetTrustResponseSchema>;
  listed.set(r, { row, res });
  return res;
}

export function createTrustService({ db, config, now }: ServiceDeps) {
  const servers = serverStore(db);
  const telemetry = telemetryStore(db);
  const scores = scoreStore(db);
  const engine = createTrustEngine(db);
  // Aggregates over every server (stats, tiers, demand, history) tolerate the staleness bound: they
  // read from a replica when DATABASE_READ_URL is set (docs/deployment.md "Read replicas").
  const stale = staleReads(db);
  const staleTelemetry = telemetryStore(stale);
  const staleScores = scoreStore(stale);

  async function resolveTracked(target: string | undefined, param: string): Promise<ServerRow> {
    if (target === undefined || target.trim() === '') throw invalidArgument(`${param} is required`);
    if (target.length > 2048) throw invalidArgument(`${param} must be at most 2048 characters`);
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(target)) throw invalidArgument(`${param} must not contain control characters`);
    const { server, ambiguous } = await servers.resolveTarget(target);
    if (server) return server;
    // A name or slug that several servers' URLs have answers none of them (docs/scoring.md "Server identity").
    if (ambiguous.length > 0) throw new ObservatoryError('not_tracked', `${target} names ${ambiguous.length} tracked servers (${ambiguous.slice(0, 5).join(', ')}${ambiguous.length > 5 ? ', ...' : ''}); ask by URL`);
    throw notTracked(target);
  }

  // GetTrust hot path: server rows by URL (hits only, SCORE_CACHE_MS like the scores) and the
  // response built once per computation and MCP view. Responses are shared: callers must not mutate them.
  const trustResponses = new WeakMap<ComputedScore, { mcp: McpTrustView | null; res: MessageInitShape<typeof GetTrustResponseSchema> }>();
  // A miss reads the server's side facts in the same statement (server-facts.ts).
  const trackedByUrl = rememberedHits(db, (url) => lookupUrlWithFacts(db, url), SCORE_CACHE_MS);

  // Figures over the whole index that pages and stats read beside the ranked list (issue 23):
  // computed at most once per SCORE_CACHE_MS, shared, served stale up to RANKED_STALE_MS while
  // one refresh runs, and settled like the ranked list (evidence committed, a catalogue import:
  // shown within AGGREGATE_SETTLE_MS) or, for drift, dropped when this process records a drift baseline.
  const FIGURES = { freshMs: SCORE_CACHE_MS, staleMs: RANKED_STALE_MS };
  /** Accepted reports per server since `at` minus the key's days ('1', '30'). */
  const countsSinceDays = cachedFigures((days, at) => staleTelemetry.countsSince(new Date(at.getTime() - Number(days) * DAY_MS)), FIGURES);
  const driftFlagged = cachedFigures((_key, at) => serversWithDriftFlag(db, at), FIGURES);
  /** The trust delta's database figures per window and number of new servers listed ('24h|1000'). */
  const deltaFigures = cachedFigures(async (key, at) => {
    const [window, limit] = key.split('|') as [string, string];
    const start = new Date(at.getTime() - DELTA_WINDOWS[window as keyof typeof DELTA_WINDOWS] * 3_600_000);
    const [prev, fresh] = await Promise.all([staleScores.snapshotsAt(start), scores.unratedSince(start, Number(limit))]);
    return { start, prev, fresh };
  }, FIGURES);
  /** How many servers without evidence a search matches, per JSON [category, q] (a person paging through a search asks each page). */
  const unratedSearchCounts = cachedFigures((key) => {
    const [category, q] = JSON.parse(key) as [string | null, string];
    return scores.unratedSearchCount(category, q);
  }, FIGURES);
  const figureCaches = [countsSinceDays, driftFlagged, deltaFigures, unratedSearchCounts];
  onTelemetryCommitted(db, () => figureCaches.forEach((c) => c.touch()));
  onDriftRecorded(db, () => driftFlagged.invalidate());

  async function tiersOf(category: string | null, at: Date): Promise<Map<string, SlaTier>> {
    const [all, counts] = await Promise.all([engine.ranked(category, at), countsSinceDays.get('30', at)]);
    return new Map(all.map((r) => [r.url, r.n > 0 && r.trust_score !== null ? slaTierFor(r.trust_score, counts.get(r.id) ?? 0) : 'Unrated']));
  }

  const market = marketStore(stale);
  let marketCache: { at: Date; figures: Promise<MarketFigures> } | null = null;
  /** Demand figures, counted at most once per MARKET_FIGURES_MS (a failed count is not kept). */
  function marketFigures(at: Date): Promise<{ at: Date; figures: MarketFigures }> {
    const c = marketCache;
    if (c && at.getTime() - c.at.getTime() < MARKET_FIGURES_MS && at.getTime() >= c.at.getTime()) return c.figures.then((figures) => ({ at: c.at, figures }));
    const figures = market.figures(new Date(at.getTime() - DAY_MS));
    const entry = { at, figures };
    marketCache = entry;
    figures.catch(() => {
      if (marketCache === entry) marketCache = null;
    });
    return figures.then((f) => ({ at, figures: f }));
  }

  // Coverage and verdict mix per ranked index (kept by the engine for SCORE_CACHE_MS): computed
  // once per index instead of once per request over every rated server.
  const coverageMemo = new WeakMap<RankedIndex, { cov: Omit<Coverage, 'at'>; mix: { pass: number; uncertain: number; fail: number; unrated: number } }>();
  function coverageOfIndex(idx: RankedIndex) {
    let c = coverageMemo.get(idx);
    if (!c) {
      const mix = { pass: 0, uncertain: 0, fail: 0, unrated: idx.unratedTotal };
      for (const r of idx.rows) mix[(isRated(r) ? r.verdict! : 'UNRATED').toLowerCase() as keyof typeof mix]++;
      c = { cov: coverageOf(idx.rows, idx.unrated), mix };
      coverageMemo.set(idx, c);
    }
    return c;
  }

  // A server's figures read from the rollups per request (the benchmark's windows, the SLA tier's
  // 30-day count), kept with the engine's score summary they were read beside: the engine hands
  // out a new summary after a report of that server (committed here or announced by another
  // instance) and at least every SCORE_CACHE_MS, so a report followed by a read shows it, and a
  // flood of reads of one server costs one set of reads per SCORE_CACHE_MS, not one per request.
  const rollupReads = new WeakMap<ScoreSummary, Map<string, Promise<unknown>>>();
  function withScore<T>(score: ScoreSummary, what: string, read: () => Promise<T>): Promise<T> {
    let reads = rollupReads.get(score);
    if (!reads) rollupReads.set(score, (reads = new Map()));
    const kept = reads.get(what);
    if (kept) return kept as Promise<T>;
    const p = read();
    reads.set(what, p);
    // A failed read is not kept (the next request reads again).
    p.catch(() => {
      if (reads.get(what) === p) reads.delete(what);
    });
    return p;
  }

  const badgeUrl = (url: string) => `${config.publicBaseUrl}/api/badge?url=${encodeURIComponent(url)}`;

  // Per ranked list (kept by the engine for SCORE_CACHE_MS): the leaderboard rank of each rated
  // server and the lower-cased text a search matches, computed once per list.
  // `byVerdict`: the rated servers of the list, all or of one verdict, for unsearched pages
  // (computed on first use per list, so a page of a 2,000-server list does not filter it again).
  const listIndex = new WeakMap<readonly RankedServer[], { rank: Map<number, number>; text: string[]; rated: number; byVerdict: Map<string | null, RankedServer[]> }>();
  function indexOf(all: readonly RankedServer[]) {
    let ix = listIndex.get(all);
    if (!ix) {
      const rank = new Map<number, number>();
      const text: string[] = [];
      for (const r of all) {
        if (isRated(r)) rank.set(r.id, rank.size + 1);
        text.push(`${r.name}\u0000${r.slug}\u0000${r.url}`.toLowerCase());
      }
      ix = { rank, text, rated: rank.size, byVerdict: new Map() };
      listIndex.set(all, ix);
    }
    return ix;
  }

  /**
   * One page of tracked servers, ranked (docs/pages.md, issue 23): filtered by category, a
   * search text (name, slug or URL contains it, any case) and a verdict (null: the rated servers,
   * i.e. the leaderboard; UNRATED: the servers without runtime evidence), after an opaque cursor
   * (src/domain/paging.ts). `rank` is the server's place on its category's leaderboard.
   */
  async function listServers(o: ListOptions) {
    // The pages call this directly: the same rules of the contract as the leaderboard's request
    // (getLeaderboard's request was checked by enforceContract and calls listPage itself).
    const violations = ruleViolations(GetLeaderboardRequestSchema, { category: o.category ?? undefined, q: o.q ?? undefined });
    if (violations.length) throw contractViolation(violations);
    return listPage(o);
  }

  async function listPage(o: ListOptions) {
    const category = o.category?.trim() ? o.category.trim().toLowerCase() : null;
    const q = normaliseSearch(o.q);
    const verdict = o.verdict?.trim() ? o.verdict.trim().toUpperCase() : null;
    if (verdict !== null && !(LIST_VERDICTS as readonly string[]).includes(verdict)) throw invalidArgument(`verdict must be one of ${LIST_VERDICTS.join(', ')}`);
    // `all` (no verdict): every tracked server, rated first (the ranked order), unrated after.
    const every = o.all === true && verdict === null;
    const signature = filterSignature({ category, q, verdict: every ? '*' : verdict });
    let after: RankKey | null = null;
    if (o.cursor !== undefined && o.cursor !== null && o.cursor !== '') {
      try {
        after = decodeCursor(o.cursor, signature);
      } catch (err) {
        if (err instanceof InvalidCursor) throw invalidArgument(err.message);
        throw err;
      }
    }
    const at = now();
    const idx = await engine.index(category, at);
    const all = idx.rows;
    const ix = indexOf(all);
    const keyOf = (r: RankedServer): RankKey => ({ s: r.trust_score, n: Number(r.n), u: r.url });
    let matches: RankedServer[] = [];
    const rated = ix.rated;
    const known = q === null ? ix.byVerdict.get(verdict) : undefined;
    if (known) matches = known;
    else if (verdict !== 'UNRATED') {
      for (let i = 0; i < all.length; i++) {
        const r = all[i]!;
        if (!isRated(r) || (verdict !== null && r.verdict !== verdict)) continue;
        if (q !== null && !ix.text[i]!.includes(q)) continue;
        matches.push(r);
      }
      if (q === null) ix.byVerdict.set(verdict, matches);
    }
    const unratedCount = idx.unratedTotal + (all.length - rated);
    // The rated part of the list from memory; the unrated part (every = rated first, then the
    // rest; or UNRATED alone) one page at a time from the database, in URL order.
    const start = after ? indexAfter(matches, keyOf, after) : 0;
    let rows = verdict === 'UNRATED' ? [] : matches.slice(start, start + o.limit);
    let total = verdict === 'UNRATED' ? 0 : matches.length;
    let more = start + rows.length < matches.length;
    // The unrated part of a search counts at most SEARCH_COUNT_CAP matches (the pages say "N+").
    let totalCapped = false;
    if (every || verdict === 'UNRATED') {
      const afterUrl = after && after.s === null && after.n === 0 ? after.u : null;
      const need = o.limit - rows.length;
      // Without a search the count is kept with the ranked list; a search's is a cached figure.
      const counted = q === null ? { total: idx.unratedTotal, capped: false } : await unratedSearchCounts.get(JSON.stringify([category, q]), at);
      total += counted.total;
      totalCapped = counted.capped;
      if (need > 0) {
        // The rated part ended on this page: the unrated follow (after the cursor's, if it named
        // one); one row more than the page decides whether a next page exists.
        const pageOfRest = await scores.unratedPage({ category, search: q, afterUrl, limit: need + 1, knownTotal: counted.total });
        rows = [...rows, ...pageOfRest.rows.slice(0, need)];
        more = pageOfRest.rows.length > need;
      } else if (counted.total > 0) more = true;
    }
    const last = rows[rows.length - 1];
    return {
      at,
      category,
      q,
      verdict,
      total,
      /** `total` is a lower bound: the search matched more servers without evidence than it counts. */
      totalCapped,
      unratedCount,
      rows: rows.map((row) => ({ row, rank: isRated(row) ? (ix.rank.get(row.id) ?? null) : null })),
      nextCursor: last && more ? encodeCursor(keyOf(last), signature) : null,
    };
  }

  // Keeps the hourly score history (deltas, trends) complete even when nobody reads scores. With
  // several instances on one database, one of them refreshes per period (advisory lock, jobs.ts).
  const snapshotJob = periodicJob(db, 'trust-score-refresh', SNAPSHOT_INTERVAL_MS, now, (at) => engine.refresh(at));

  return {
    engine,

    /** The periodic score refresh (tick it directly with a fixed clock in tests). */
    snapshotJob,

    /** Stops the snapshot timer. */
    close(): void {
      snapshotJob.stop();
    },

    /**
     * Current score, verdict and anomaly flags of a tracked server; cheap (cached, refreshed when
     * stale). Drift and Server Card flags are added to the flags; neither moves the score.
     */
    async scoreFor(server: ServerRow): Promise<ScoreSummary & { server_card: ServerCardCheck | null; protocol_version: string | null; listing: RegistryListingRow | null }> {
      const at = now();
      const [s, { driftFlags, mcp, listing }] = await Promise.all([engine.scoreFor(server, at), serverFacts(db, server.id, at)]);
      // The same summary, probe view and listing give the same (never mutated) answer: built once
      // per summary instead of per pre-flight (drift flags depend on the time, so not with them).
      const known = driftFlags.length === 0 ? scoreViews.get(s) : undefined;
      if (known && known.mcp === mcp && known.listing === listing) return known.value;
      const extra = [...driftFlags, ...(mcp?.flags ?? [])];
      const value = Object.assign({}, s, {
        anomaly_flags: extra.length > 0 ? [...s.anomaly_flags, ...extra] : s.anomaly_flags,
        server_card: mcp?.serverCard ?? null,
        protocol_version: mcp?.protocolVersion ?? null,
        listing,
      });
      if (driftFlags.length === 0) scoreViews.set(s, { mcp, listing, value });
      return value;
    },

    /**
     * A tracked server's p95 latency over all its reports (null without reports): latencyP95 of
     * its rollup histogram, the figure /benchmark, /v1/behavioral-evidence and the ERC-8004
     * evidence show. Callers outside this service (agent-query) use this, never their own p95.
     */
    async p95LatencyFor(server: Pick<ServerRow, 'id'>): Promise<number | null> {
      const t = (await telemetry.totals([server.id])).get(server.id);
      return t ? latencyP95(t.hist) : null;
    },

    async getTrust(req: Partial<GetTrustRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetTrustResponseSchema>> {
      let tracked: ServerRow | null;
      // A URL (anything with a scheme) must be a valid http(s) URL; anything else is a server
      // name, MCP Registry name (io.github.acme/weather) or slug (DECISIONS.md).
      if (req.url === undefined || !/^[a-z][a-z0-9+.-]*:/i.test(req.url.trim())) {
        tracked = await resolveTracked(req.url, 'url');
      } else {
        const url = requireServerUrl(req.url, 'url');
        tracked = await trackedByUrl(url);
        if (!tracked) throw notTracked(url);
      }
      const at = now();
      // Drift flags and the MCP probe's view change with probes, not telemetry, so they are read
      // each time; the cached response is only reused while no drift flag is active and the view
      // is the same object (mcpTrustView keeps it while nothing changed).
      // Both from memory when fresh; each a single statement otherwise (issue 23).
      const [c, { driftFlags, mcp, listing }] = await Promise.all([engine.current(tracked, at), serverFacts(db, tracked.id, at)]);
      const server = c.server;
      const known = driftFlags.length === 0 ? trustResponses.get(c) : undefined;
      if (known && known.mcp === mcp) return withListing(known.res, listing);
      const flags = [...c.anomaly.flags, ...driftFlags, ...(mcp?.flags ?? [])];
      const n = c.totals?.n ?? 0;
      const res: MessageInitShape<typeof GetTrustResponseSchema> = {
        server: {
          name: server.name,
          url: server.url,
          slug: server.slug,
          category: server.category,
          trustScore: c.trust_score,
          registeredAt: server.registered_at.toISOString(),
          protocolVersion: mcp?.protocolVersion,
        },
        metrics: {
          totalInteractions: n,
          avgLatencyMs: n > 0 ? c.totals!.latency_sum / n : 0,
          successRate: n > 0 ? c.totals!.successes / n : undefined,
        },
        categoryBaseline: {
          category: server.category,
          avgLatencyMs: c.baseline.avg_latency_ms,
          p95LatencyMs: c.baseline.p95_latency_ms,
          avgSuccessRate: c.baseline.avg_success_rate,
          serverCount: c.baseline.server_count,
        },
        anomaly: { isAnomalous: flags.length > 0, anomalyFlags: flags },
        scoreBreakdown: Object.assign({}, c.breakdown, { anomaly_details: c.anomaly.details, computed_at: c.computed_at.toISOString() }),
        verdict: c.verdict,
        serverCard: mcp?.serverCard ?? undefined,
      };
      if (driftFlags.length === 0) trustResponses.set(c, { mcp, res });
      return withListing(res, listing);
    },

    async getLeaderboard(req: Partial<GetLeaderboardRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetLeaderboardResponseSchema>> {
      const limit = req.limit ?? LEADERBOARD_DEFAULT_LIMIT;
      // limit's range is a rule of the contract (buf.validate on GetLeaderboardRequest.limit).
      const verdict = req.verdict?.trim() ? req.verdict.trim().toUpperCase() : null;
      // The leaderboard ranks rated servers only: UNRATED ones are listed on /atlas/report.
      if (verdict !== null && !['PASS', 'UNCERTAIN', 'FAIL'].includes(verdict)) throw invalidArgument('verdict must be PASS, UNCERTAIN or FAIL (unrated servers are not ranked)');
      const page = await listPage({ category: req.category, q: req.q, verdict, cursor: req.cursor, limit });
      return {
        category: page.category ?? 'all',
        totalResults: page.total,
        unratedCount: page.unratedCount,
        generatedAt: page.at.toISOString(),
        nextCursor: page.nextCursor ?? undefined,
        servers: page.rows.map(({ row: r, rank }) => ({
          rank: rank!,
          url: r.url,
          name: r.name,
          slug: r.slug,
          category: r.category,
          trustScore: r.trust_score!,
          verdict: r.verdict!,
          successRate: rate(r.successes, r.n),
          avgLatencyMs: ms(r.latency_sum, r.n) ?? 0,
          totalInteractions: r.n,
          trackedSince: r.registered_at.toISOString(),
        })),
      };
    },

    listServers,

    /**
     * Coverage of the index as of now: tracked, rated and unrated servers and interactions per
     * category (most servers first) and in total. THE count behind /api/stats, the leaderboard's
     * unrated_count and /atlas/report.
     */
    async getCoverage(category: string | null = null): Promise<Coverage> {
      const at = now();
      const idx = await engine.index(category, at);
      return { at, ...coverageOfIndex(idx).cov };
    },

    async getStats(_req: Partial<GetStatsRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetStatsResponseSchema>> {
      const at = now();
      const [idx, last24, m] = await Promise.all([engine.index(null, at), countsSinceDays.get('1', at), marketFigures(at)]);
      const { cov, mix } = coverageOfIndex(idx);
      return {
        totalServersTracked: cov.totals.servers,
        totalServersRated: cov.totals.rated,
        totalServersUnrated: cov.totals.unrated,
        totalInteractionsRecorded: cov.totals.interactions,
        averageTrustScore: cov.totals.averageTrustScore,
        interactionsLast24h: [...last24.values()].reduce((s, n) => s + n, 0),
        categories: cov.categories.map((c) => ({ name: c.name, servers: c.servers, rated: c.rated, unrated: c.unrated, averageTrustScore: c.averageTrustScore })),
        verdictMix: { ...mix },
        generatedAt: at.toISOString(),
        marketValidation: {
          preflightChecksTotal: m.figures.preflight_checks_total,
          preflightChecksLast24h: m.figures.preflight_checks_last_24h,
          uniquePreflightTargets: m.figures.unique_preflight_targets,
          trackedServersVetted: m.figures.tracked_servers_vetted,
          gatewayDecisions: m.figures.gateway_decisions,
          agentKeysIssued: m.figures.agent_keys_issued,
          agentQueriesServed: m.figures.agent_queries_served,
          paidVerdicts: m.figures.paid_verdicts,
          receiptsIssued: m.figures.receipts_issued,
          vettedShare: cov.totals.servers > 0 ? Math.round((Math.min(m.figures.tracked_servers_vetted, cov.totals.servers) / cov.totals.servers) * 10000) / 10000 : undefined,
          computedAt: m.at.toISOString(),
        },
      };
    },

    async getBenchmark(req: Partial<GetBenchmarkRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetBenchmarkResponseSchema>> {
      const server = await resolveTracked(req.serverSlug, 'server_slug');
      const at = now();
      const t7 = new Date(at.getTime() - 7 * DAY_MS);
      const score = await engine.scoreFor(server, at);
      const [totalsMap, w7, w30, prev7, days] = await withScore(score, 'benchmark', () =>
        Promise.all([
          telemetry.totals([server.id]),
          telemetry.windowSums(server.id, t7, null),
          telemetry.windowSums(server.id, new Date(at.getTime() - 30 * DAY_MS), null),
          telemetry.windowSums(server.id, new Date(at.getTime() - 14 * DAY_MS), t7),
          telemetry.daysObserved(server.id),
        ]),
      );
      const t = totalsMap.get(server.id);
      const n = t?.n ?? 0;
      return {
        serverSlug: server.slug,
        serverUrl: server.url,
        name: server.name,
        category: server.category,
        trustScore: score.trust_score,
        trustGrade: gradeFor(score.trust_score),
        verdict: score.verdict,
        reliability: {
          successRate7d: rate(w7.successes, w7.n),
          successRate30d: rate(w30.successes, w30.n),
          successRateAlltime: rate(t?.successes ?? 0, n),
          trend: reliabilityTrend(w7, prev7),
        },
        latency: {
          avgMs: ms(t?.latency_sum ?? 0, n),
          p95Ms: t ? (latencyP95(t.hist) ?? undefined) : undefined,
          avg7dMs: ms(w7.latency_sum, w7.n),
        },
        volume: { totalCalls: n, calls7d: w7.n, daysObserved: days },
        lastUpdated: t?.last_at.toISOString(),
      };
    },

    async getSlaTier(req: Partial<GetSlaTierRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetSlaTierResponseSchema>> {
      const at = now();
      const since30 = new Date(at.getTime() - 30 * DAY_MS);
      // `server` is optional (SPEC 4.1): absent or empty asks for the distribution.
      if (req.server !== undefined && req.server.trim() !== '') {
        const server = await resolveTracked(req.server, 'server');
        const score = await engine.scoreFor(server, at);
        const w30 = await withScore(score, 'sla-30d', () => telemetry.windowSums(server.id, since30, null));
        return {
          schema: SLA_SCHEMA,
          serverUrl: server.url,
          name: server.name,
          tier: score.verdict === 'UNRATED' ? 'Unrated' : slaTierFor(score.trust_score, w30.n),
          trustScore: score.trust_score,
          certifiedAt: at.toISOString(),
          criteria: SLA_CRITERIA,
          badgeUrl: badgeUrl(server.url),
          interactions30d: w30.n,
        };
      }
      const distribution: Record<SlaTier, number> = { Platinum: 0, Gold: 0, Silver: 0, Bronze: 0, Unrated: 0 };
      const [tiers, idx] = await Promise.all([tiersOf(null, at), engine.index(null, at)]);
      for (const tier of tiers.values()) distribution[tier]++;
      distribution.Unrated += idx.unratedTotal;
      return { schema: SLA_SCHEMA, generatedAt: at.toISOString(), distribution, criteria: SLA_CRITERIA };
    },

    /** The SLA tier of the given servers (a page of a list), keyed by canonical URL. */
    async getSlaTiersOf(rows: readonly RankedServer[]): Promise<Map<string, SlaTier>> {
      const at = now();
      const counts = await telemetry.countsSinceFor(
        rows.filter(isRated).map((r) => r.id),
        new Date(at.getTime() - 30 * DAY_MS),
      );
      return new Map(rows.map((r) => [r.url, isRated(r) ? slaTierFor(r.trust_score!, counts.get(r.id) ?? 0) : 'Unrated']));
    },

    /** Trust score history (hourly snapshots) of the given servers (a page of a list), keyed by canonical URL. */
    async getTrustHistoryOf(rows: readonly RankedServer[], days: number): Promise<Map<string, { at: Date; trustScore: number }[]>> {
      const at = now();
      const hist = await scores.history(
        rows.map((r) => r.id),
        new Date(at.getTime() - days * DAY_MS),
        at,
      );
      return new Map(rows.map((r) => [r.url, (hist.get(r.id) ?? []).map((p) => ({ at: p.bucket, trustScore: p.trust_score }))]));
    },

    /** The SLA tier of every server of a category (null: all), keyed by canonical URL. */
    getSlaTiers(category: string | null): Promise<Map<string, SlaTier>> {
      return tiersOf(category, now());
    },

    async getTrustDelta(req: Partial<GetTrustDeltaRequest> & { newLimit?: number }, _ctx?: CallContext): Promise<MessageInitShape<typeof GetTrustDeltaResponseSchema>> {
      const window = req.window ?? DEFAULT_DELTA_WINDOW;
      if (!isDeltaWindow(window)) throw invalidArgument(`window must be one of ${Object.keys(DELTA_WINDOWS).join(', ')}`);
      const at = now();
      const paged = req.list !== undefined && req.list !== '';
      if (!paged && ((req.cursor !== undefined && req.cursor !== '') || req.limit !== undefined)) throw invalidArgument('cursor and limit page one list: give list too (new, improved, degraded or at_risk)');
      if (paged && !(DELTA_LISTS as readonly string[]).includes(req.list!)) throw invalidArgument(`list must be one of ${DELTA_LISTS.join(', ')}`);
      const signature = JSON.stringify(['trust-delta', window, req.list ?? '']);
      let after: (number | string)[] | null = null;
      if (paged && req.cursor) {
        try {
          after = decodeListCursor(req.cursor, signature, req.list === 'new' ? ['number', 'number'] : ['number', 'string']);
        } catch (err) {
          if (err instanceof InvalidCursor) throw invalidArgument(err.message);
          throw err;
        }
      }
      const [all, { start, prev, fresh }] = await Promise.all([engine.ranked(null, at), deltaFigures.get(`${window}|${paged ? 0 : (req.newLimit ?? NEW_SERVERS_LISTED)}`, at)]);
      const g = groupDeltas(
        all.map((r) => ({
          id: r.id,
          url: r.url,
          name: r.name,
          category: r.category,
          registered_at: r.registered_at,
          trust_score: r.n > 0 ? r.trust_score : null,
          prev_score: prev.get(r.id) ?? null,
        })),
        start,
      );
      // New servers without evidence come from their own query (a catalogue import adds thousands).
      const unratedNew = fresh.rows.map((r) => ({ url: r.url, name: r.name, category: r.category, trustScore: 0, registeredAt: r.registered_at.toISOString() }));
      const change = (s: (typeof g.servers_improved)[number]) => ({ url: s.url, name: s.name, trustScore: s.trust_score!, prevScore: s.prev_score!, delta: s.delta });
      const summary = {
        newServers: g.servers_new.length + Math.max(0, fresh.total - all.filter((r) => r.registered_at.getTime() > start.getTime()).length),
        serversImproved: g.servers_improved.length,
        serversDegraded: g.servers_degraded.length,
        serversAtRisk: g.servers_at_risk.length,
      };
      if (paged) {
        // One list, one page (issue 23): a fixed order with a unique key per server, after the cursor's key.
        const limit = req.limit ?? DELTA_PAGE_DEFAULT;
        const base = { schema: DELTA_SCHEMA, generatedAt: at.toISOString(), window, summary, serversNew: [], serversImproved: [], serversDegraded: [], serversAtRisk: [] };
        if (req.list === 'new') {
          // Every server registered in the window, newest first, from the database (an import adds thousands).
          const score = new Map(all.map((r) => [r.id, r.n > 0 && r.trust_score !== null ? r.trust_score : 0]));
          const rows = await scores.registeredSincePage(start, after ? { us: after[0] as number, id: after[1] as number } : null, limit + 1);
          const page = rows.slice(0, limit);
          const last = page[page.length - 1];
          return {
            ...base,
            serversNew: page.map((r) => ({ url: r.url, name: r.name, category: r.category, trustScore: score.get(r.id) ?? 0, registeredAt: r.registered_at.toISOString() })),
            nextCursor: last && rows.length > limit ? encodeListCursor([last.us, last.id], signature) : undefined,
          };
        }
        // Improved: delta descending; degraded: delta ascending; at risk: score ascending; then URL.
        const list = req.list === 'improved' ? g.servers_improved : req.list === 'degraded' ? g.servers_degraded : g.servers_at_risk;
        const sign = req.list === 'improved' ? -1 : 1;
        const value = (s: (typeof list)[number]) => (req.list === 'at_risk' ? s.trust_score! : (s as (typeof g.servers_improved)[number]).delta);
        const cmp = (av: number, au: string, bv: number, bu: string) => (av !== bv ? sign * (av - bv) : au < bu ? -1 : au > bu ? 1 : 0);
        const sorted = [...list].sort((a, b) => cmp(value(a), a.url, value(b), b.url));
        const from = after ? sorted.findIndex((s) => cmp(value(s), s.url, after[0] as number, after[1] as string) > 0) : 0;
        const page = from < 0 ? [] : sorted.slice(from, from + limit);
        const last = page[page.length - 1];
        const more = from >= 0 && from + limit < sorted.length;
        return {
          ...base,
          serversImproved: req.list === 'improved' ? page.map((s) => change(s as (typeof g.servers_improved)[number])) : [],
          serversDegraded: req.list === 'degraded' ? page.map((s) => change(s as (typeof g.servers_improved)[number])) : [],
          serversAtRisk: req.list === 'at_risk' ? page.map((s) => ({ url: s.url, name: s.name, trustScore: s.trust_score! })) : [],
          nextCursor: last && more ? encodeListCursor([value(last), last.url], signature) : undefined,
        };
      }
      return {
        schema: DELTA_SCHEMA,
        generatedAt: at.toISOString(),
        window,
        summary,
        serversNew: [...g.servers_new.map((s) => ({ url: s.url, name: s.name, category: s.category, trustScore: s.trust_score ?? 0, registeredAt: s.registered_at.toISOString() })), ...unratedNew],
        serversImproved: g.servers_improved.map(change),
        serversDegraded: g.servers_degraded.map(change),
        serversAtRisk: g.servers_at_risk.map((s) => ({ url: s.url, name: s.name, trustScore: s.trust_score! })),
      };
    },

    /** Trust score history (hourly snapshots) of every server of a category (null: all), keyed by canonical URL. */
    async getTrustHistory(category: string | null, days: number): Promise<Map<string, { at: Date; trustScore: number }[]>> {
      const at = now();
      const all = await engine.ranked(category, at);
      const hist = await scores.history(
        all.map((r) => r.id),
        new Date(at.getTime() - days * DAY_MS),
        at,
      );
      return new Map(all.map((r) => [r.url, (hist.get(r.id) ?? []).map((p) => ({ at: p.bucket, trustScore: p.trust_score }))]));
    },

    /**
     * Servers with an active anomaly flag (runtime anomalies of the current score, and
     * tool_manifest_drift from the drift baselines), lowest score first; servers without a score
     * (drift on an unrated server) last.
     */
    async getAnomalies(category: string | null): Promise<{ url: string; name: string; slug: string; category: string; trustScore: number | null; verdict: string; flags: string[] }[]> {
      const at = now();
      const [rated, drifted] = await Promise.all([engine.ranked(category, at), driftFlagged.get('all', at)]);
      // Drifted servers without evidence are not among the ranked rows: read by id.
      const ratedIds = new Set(rated.map((r) => r.id));
      const extra = (await scores.serverRows([...drifted].filter((id) => !ratedIds.has(id))))
        .filter((r) => category === null || r.category === category)
        .map((r): RankedServer => Object.assign({}, r, { trust_score: null, verdict: null, computed_at: null, anomaly_flags: null, n: 0, successes: 0, latency_sum: 0, last_at: null }));
      return [...rated, ...extra]
        .map((r) => {
          const rated = r.n > 0 && r.trust_score !== null;
          const flags = [...(rated ? (r.anomaly_flags ?? []) : []), ...(drifted.has(r.id) ? [DRIFT_FLAG] : [])];
          return { url: r.url, name: r.name, slug: r.slug, category: r.category, trustScore: rated ? r.trust_score : null, verdict: rated ? r.verdict! : 'UNRATED', flags };
        })
        .filter((r) => r.flags.length > 0)
        .sort((a, b) => (a.trustScore ?? Infinity) - (b.trustScore ?? Infinity));
    },

    /**
     * One server's daily latency and success rate over the last `days` days (UTC days, from the
     * hourly rollups; days without reports are absent) and its hourly trust score history.
     */
    async getServerSeries(target: string, days: number) {
      const server = await resolveTracked(target, 'server');
      const at = now();
      const from = new Date(Math.floor(at.getTime() / DAY_MS) * DAY_MS - (days - 1) * DAY_MS);
      const [hourly, hist] = await Promise.all([telemetry.hourly([server.id], from, at), scores.history([server.id], from, at)]);
      const byDay = new Map<number, { n: number; successes: number; latency_sum: number }>();
      for (const h of hourly.get(server.id) ?? []) {
        const d = Math.floor(h.bucket.getTime() / DAY_MS) * DAY_MS;
        const acc = byDay.get(d) ?? { n: 0, successes: 0, latency_sum: 0 };
        acc.n += Number(h.n);
        acc.successes += Number(h.successes);
        acc.latency_sum += Number(h.latency_sum);
        byDay.set(d, acc);
      }
      return {
        server,
        from,
        to: at,
        daily: [...byDay.entries()]
          .sort((a, b) => a[0] - b[0])
          .map(([d, v]) => ({ day: new Date(d), interactions: v.n, successRate: rate(v.successes, v.n)!, avgLatencyMs: ms(v.latency_sum, v.n)! })),
        trustHistory: (hist.get(server.id) ?? []).map((p) => ({ at: p.bucket, trustScore: p.trust_score })),
      };
    },

    async getBadge(req: Partial<GetBadgeRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetBadgeResponseSchema>> {
      const url = requireServerUrl(req.url, 'url');
      const server = await servers.lookupUrl(url);
      const score = server ? await engine.scoreFor(server, now()) : null;
      const verdict: PreflightVerdict = score?.verdict ?? 'UNRATED';
      const rated = score !== null && verdict !== 'UNRATED';
      const svg = badgeSvg(rated ? `${score.trust_score.toFixed(1)} ${verdict}` : 'unrated', verdict);
      return { svg, verdict, trustScore: rated ? score.trust_score : undefined };
    },
  };
}

export type TrustService = ReturnType<typeof createTrustService>;

/**
 * Badge SVGs by message (score and verdict, or "unrated"): badge-maker lays out and measures the
 * text on every call, 0.25 ms of CPU per request of a public, uncounted endpoint. There are at most
 * 1,001 scores x 3 verdicts + 1 messages, so the memo is bounded by what it can hold.
 */
const badgeMemo = new Map<string, string>();
function badgeSvg(message: string, verdict: PreflightVerdict): string {
  let svg = badgeMemo.get(message);
  if (svg === undefined) {
    svg = makeBadge({ label: 'MCP trust', message, color: BADGE_COLORS[verdict] });
    badgeMemo.set(message, svg);
  }
  return svg;
}
