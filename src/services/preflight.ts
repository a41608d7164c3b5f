import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetDemandRequest, GetDemandResponseSchema, PreflightRequest, PreflightResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { canonicalServerUrl, InvalidServerUrl, looksLikeUrl } from '../domain/server-identity.js';
import { RECOMMENDATIONS, type PreflightVerdict } from '../domain/verdict.js';
import { invalidArgument } from '../errors.js';
import { decodeListCursor, encodeListCursor, InvalidCursor } from '../domain/paging.js';
import type { IssuedReceipt, ReceiptKind } from '../signing/receipts.js';
import { demandBuffer, demandStore, onDemandRecorded, type DemandTarget, type VerdictCounts } from '../store/demand.js';
import { receiptBatcher } from '../store/receipt-batcher.js';
import type { ServerRow } from '../store/servers.js';
import { rememberedHits } from '../store/server-cache.js';
import { BoundedMap } from '../store/cache-limits.js';
import type { RegistryListingRow } from '../store/registry-sync.js';
import { listingMessage } from './registry-sync.js';
import { resolveWithFacts } from './server-facts.js';
import { RANKED_STALE_MS, SCORE_CACHE_MS } from './trust-engine.js';
import { cachedFigures } from './cached-figure.js';
import type { CallContext, ServiceDeps } from './context.js';
import type { ServerCardCheck } from './mcp-probe.js';
import type { TrustService } from './trust.js';

/**
 * Checks and gate decisions that would return the same claim (target, server, verdict, score,
 * counts, flags, kind, gateway decision and policy) within this long share one receipt: signed
 * once, stored before the first answer that carries it (docs/performance.md "Pre-flight").
 */
export const RECEIPT_SHARE_MS = 1000;
/** Most-vetted targets listed per demand window. */
export const DEMAND_TOP_TARGETS = 20;
export const DEMAND_WINDOWS = [
  { window: '24h', ms: 24 * 3600_000 },
  { window: '7d', ms: 7 * 24 * 3600_000 },
  { window: '30d', ms: 30 * 24 * 3600_000 },
  { window: 'alltime', ms: null },
] as const;

export type PreflightResult = MessageInitShape<typeof PreflightResponseSchema> & {
  target: string;
  verdict: PreflightVerdict;
  recommendation: string;
  diligenceReceipt: string;
  receiptId: string;
  checkedAt: string;
};

export interface PreflightOptions {
  /** Receipt kind of the diligence receipt; `preflight` by default (gateway, agent_query reuse this). */
  kind?: ReceiptKind;
  /** Extra members of the signed claim (e.g. the gateway's decision); cannot override the verdict fields. */
  claim?: Record<string, unknown>;
  /**
   * The identity of `claim` for receipt sharing, equal exactly when the claims are (the gate's
   * gatewayClaimKey); without it, JSON.stringify(claim).
   */
  claimKey?: string;
  /** Record the check as a demand signal (default true). */
  recordDemand?: boolean;
  /** A recent `assess(target)` result to reuse instead of looking the target up again. */
  assessment?: PreflightAssessment;
}

/** What a pre-flight found out about its target (see `assess`). */
export interface PreflightAssessment {
  givenUrl: string | null;
  server: ServerRow | null;
  verdict: PreflightVerdict;
  trustScore: number | undefined;
  totalInteractions: number;
  anomalyFlags: string[];
  /** The server's MCP Registry listing; null when untracked or never listed. */
  listing: RegistryListingRow | null;
  /** The server's Server Card against runtime at its latest probe (null: none found, or never probed). */
  serverCard: ServerCardCheck | null;
}

const VERDICTS: readonly string[] = ['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'];

/**
 * The identity of a pre-flight claim (receipts are shared per claim within RECEIPT_SHARE_MS):
 * every member of the statement, joined with NUL, which none of them can hold (the target is
 * refused with control characters; URLs are canonical; names come from the database, which
 * cannot store NUL); a nullable member is '-' when null and '+' and its value otherwise. Built
 * per call, so plain concatenation instead of JSON.stringify of the whole statement; anomaly
 * flags are JSON, and so are the caller's extra members unless it gives their identity itself
 * (`extraKey`: the gate's gatewayClaimKey).
 */
export function claimKey(
  kind: string,
  s: { target: string; server_url: string | null; name: string | null; tracked: boolean; verdict: string; trust_score: number | null; recommendation: string; total_interactions: number; anomaly_flags: readonly string[] },
  extra: Record<string, unknown> | undefined,
  extraKey?: string,
): string {
  // The extra members: none (''), their JSON ('{...}'), or the caller's own identity of them,
  // which never starts with '{' (gatewayClaimKey starts with '-' or a digit).
  const e = extra === undefined ? '' : (extraKey ?? JSON.stringify(extra));
  return (
    `${kind}\u0000${s.target}\u0000${s.server_url === null ? '-' : `+${s.server_url}`}\u0000${s.tracked ? 1 : 0}\u0000${s.name === null ? '-' : `+${s.name}`}\u0000${s.verdict}\u0000${s.trust_score ?? ''}` +
    `\u0000${s.recommendation}\u0000${s.total_interactions}\u0000${s.anomaly_flags.length === 0 ? '' : JSON.stringify(s.anomaly_flags)}\u0000${e}`
  );
}

/**
 * Pre-flight checks and the demand they create: THE implementation of TrustService.Preflight and
 * TrustService.GetDemand. The score comes from the trust service's public scoreFor; pre-flight
 * writes only a receipt and a demand row, neither of which any score reads.
 */
export function createPreflightService(deps: ServiceDeps, trust: Pick<TrustService, 'scoreFor'>) {
  const { db, now, receipts } = deps;
  const demand = demandStore(db);
  const store = receiptBatcher(db, { onBatch: deps.observe?.receiptBatch });
  const demandRows = demandBuffer(db, deps.onBackgroundError);
  // Receipts being shared (RECEIPT_SHARE_MS), by claim: `ready` settles once the receipt is signed and stored.
  // `answer` is the answer built for the first caller, handed to every later caller of the claim
  // whose registry listing and Server Card (not part of the claim) are the same objects; answers
  // are shared, callers must not mutate them (the REST adapter serialises each one once).
  // At most CACHE_MAX_ENTRIES claims (src/store/cache-limits.ts), the oldest dropped first; and
  // about once per RECEIPT_SHARE_MS the expired ones are dropped, so it holds little more than the
  // last second's claims. Dropping an entry never invalidates it for the callers already holding
  // it: they still await its `ready` and answer with its receipt.
  const shared = new BoundedMap<string, { at: number; mono: number; checkedAt: Date; ready: Promise<IssuedReceipt>; answer?: { listing: RegistryListingRow | null; serverCard: ServerCardCheck | null; value: PreflightResult } }>();
  // Resolved targets (hits only) for SCORE_CACHE_MS: a server row only ever changes its category.
  // A miss by URL reads the server's side facts in the same statement (server-facts.ts).
  const resolve = rememberedHits(db, (target) => resolveWithFacts(db, target), SCORE_CACHE_MS);
  // performance.now() of the last sweep of expired shared receipts.
  let swept = 0;
  function dropExpired(mono: number): void {
    // Insertion order is age order (an entry is only set when new, with the time of that moment).
    for (const [k, e] of shared) {
      if (mono - e.mono < RECEIPT_SHARE_MS) break;
      shared.delete(k);
    }
  }

  /**
   * The lookup half of a pre-flight: what the observatory knows about `target` right now. The
   * gateway gate caches this briefly per upstream and passes it back through
   * `PreflightOptions.assessment`; each decision still carries a stored receipt (shared by
   * decisions stating the same claim within RECEIPT_SHARE_MS).
   */
  async function assess(target: string): Promise<PreflightAssessment> {
    let givenUrl: string | null = null;
    if (looksLikeUrl(target)) {
      try {
        givenUrl = canonicalServerUrl(target);
      } catch (err) {
        if (err instanceof InvalidServerUrl) throw invalidArgument(`target: ${err.message}`);
        throw err;
      }
    }

    const server = await resolve(target);
    let verdict: PreflightVerdict = 'UNRATED';
    let trustScore: number | undefined;
    let totalInteractions = 0;
    let anomalyFlags: string[] = [];
    let listing: RegistryListingRow | null = null;
    let serverCard: ServerCardCheck | null = null;
    if (server) {
      // The trust service's cheap, cached score (never recomputed here: one source per figure),
      // with the server's listing read beside it.
      const score = await trust.scoreFor(server);
      listing = score.listing;
      totalInteractions = score.total_interactions;
      anomalyFlags = [...score.anomaly_flags];
      serverCard = score.server_card;
      // UNRATED: no accepted telemetry (DECISIONS.md); otherwise the trust service's verdict.
      if (totalInteractions > 0 && VERDICTS.includes(score.verdict)) {
        verdict = score.verdict;
        if (verdict !== 'UNRATED') trustScore = score.trust_score;
      }
    }

    return { givenUrl, server, verdict, trustScore, totalInteractions, anomalyFlags, listing, serverCard };
  }

  async function preflight(req: Partial<PreflightRequest>, _ctx?: CallContext, opts: PreflightOptions = {}): Promise<PreflightResult> {
    const target = (req.target ?? '').trim();
    if (target === '') throw invalidArgument('target is required (an MCP server URL, name or slug)');
    // NUL and other control characters are never part of a URL or a name (and PostgreSQL cannot store NUL).
    if (/[\u0000-\u001f\u007f]/.test(target)) throw invalidArgument('target must not contain control characters');
    const { givenUrl, server, verdict, trustScore, totalInteractions, anomalyFlags, listing, serverCard } = opts.assessment ?? (await assess(target));

    const serverUrl = server?.url ?? givenUrl;
    const recommendation = RECOMMENDATIONS[verdict];
    const at = now();
    const kind = opts.kind ?? 'preflight';
    const verdictMembers = {
      target,
      server_url: serverUrl,
      name: server?.name ?? null,
      tracked: server !== null,
      verdict,
      trust_score: trustScore ?? null,
      recommendation,
      total_interactions: totalInteractions,
      anomaly_flags: anomalyFlags,
    };
    // One signature per claim, not per call: the same statement within RECEIPT_SHARE_MS shares
    // the receipt (and its checked_at). A receipt never names the caller, so sharing tells no one
    // anything about anyone else.
    const key = claimKey(kind, verdictMembers, opts.claim, opts.claimKey);
    let entry = shared.get(key);
    const mono = performance.now();
    if (entry && (mono - entry.mono >= RECEIPT_SHARE_MS || at.getTime() - entry.at >= RECEIPT_SHARE_MS || at.getTime() < entry.at)) {
      shared.delete(key);
      entry = undefined;
    }
    if (!entry) {
      const checkedAt = at;
      const sub = serverUrl ?? target;
      const ready = (async () => {
        // Signed here, stored by the group commit with other concurrent receipts; nobody is
        // answered with it before the statement holding it committed.
        // The statement: the caller's extra members, then the verdict's, which they cannot
        // override. Object.assign, not `{ ...opts.claim, target, ... }`: on Node 20 each member
        // added after a spread of a non-empty object costs ~0.5 us (docs/performance.md "Object spread").
        const statement = Object.assign({}, opts.claim, verdictMembers, { checked_at: checkedAt.toISOString() });
        const receipt = await receipts.issue(kind, sub, statement, { persist: false });
        await store.submit([{ receipt_id: receipt.receiptId, kind, sub, issued_at: receipt.issuedAt, kid: receipt.kid, claim: receipt.payload, jws: receipt.jws }]);
        return receipt;
      })();
      entry = { at: at.getTime(), mono, checkedAt, ready };
      if (mono - swept >= RECEIPT_SHARE_MS) {
        swept = mono;
        dropExpired(mono);
      }
      shared.set(key, entry);
      const mine = entry;
      // A failed issue is not shared: the next call tries again.
      ready.catch(() => {
        if (shared.get(key) === mine) shared.delete(key);
      });
    }
    const receipt = await entry.ready;
    const checkedAt = entry.checkedAt;
    // Demand stays per call: counted in memory (one row per claim's receipt and write, with its
    // number of calls), written within DEMAND_FLUSH_MS.
    if (opts.recordDemand !== false) {
      demandRows.add({ checked_at: at, target: serverUrl ?? target, server_url: serverUrl, name: server?.name ?? null, verdict, kind, receipt_id: receipt.receiptId });
    }
    const known = entry.answer;
    if (known && known.listing === listing && known.serverCard === serverCard) return known.value;
    const value: PreflightResult = {
      target,
      serverUrl: serverUrl ?? undefined,
      verdict,
      trustScore,
      recommendation,
      diligenceReceipt: receipt.jws,
      receiptId: receipt.receiptId,
      checkedAt: checkedAt.toISOString(),
      name: server?.name,
      tracked: server !== null,
      totalInteractions,
      anomalyFlags,
      registry: listingMessage(listing),
      serverCard: serverCard ?? undefined,
    };
    entry.answer = { listing, serverCard, value };
    return value;
  }

  const mixOf = (c: VerdictCounts) => ({ pass: c.pass, uncertain: c.uncertain, fail: c.fail, unrated: c.unrated });

  const serverOf = (t: DemandTarget) => ({
    target: t.target,
    serverUrl: t.server_url ?? undefined,
    name: t.name ?? undefined,
    checks: t.checks,
    verdictMix: mixOf(t),
    lastCheckedAt: t.last_checked_at.toISOString(),
    lastVerdict: t.last_verdict,
  });

  /** One window's targets, one page at a time (GET /api/demand?window=...; issue 23). */
  async function getDemandPage(req: Partial<GetDemandRequest>): Promise<MessageInitShape<typeof GetDemandResponseSchema>> {
    const w = DEMAND_WINDOWS.find((x) => x.window === req.window);
    if (!w) throw invalidArgument(`window must be one of ${DEMAND_WINDOWS.map((x) => x.window).join(', ')}`);
    const limit = req.limit ?? DEMAND_TOP_TARGETS;
    const signature = JSON.stringify(['demand', w.window]);
    let after: { checks: number; us: number; target: string } | null = null;
    if (req.cursor) {
      try {
        const [checks, us, target] = decodeListCursor(req.cursor, signature, ['number', 'number', 'string']) as [number, number, string];
        after = { checks, us, target };
      } catch (err) {
        if (err instanceof InvalidCursor) throw invalidArgument(err.message);
        throw err;
      }
    }
    const at = now();
    const since = w.ms === null ? null : new Date(at.getTime() - w.ms);
    // The totals are the cached figures the unpaged answer shows; only the page is read here.
    const [figures, page] = await Promise.all([demandWindows.get('all', at), demand.topTargetsPage(since, after, limit + 1)]);
    const rows = page.slice(0, limit);
    const last = rows[rows.length - 1];
    const all = figures[figures.length - 1]!.totals;
    const t = figures[DEMAND_WINDOWS.indexOf(w)]!.totals;
    return {
      generatedAt: at.toISOString(),
      totalPreflightChecks: all.total,
      uniqueTargets: all.unique_targets,
      verdictMix: mixOf(all),
      windows: [{ window: w.window, totalChecks: t.total, uniqueTargets: t.unique_targets, verdictMix: mixOf(t), servers: rows.map(serverOf) }],
      note: 'Pre-flight checks are demand signals only; they never feed trust scores.',
      nextCursor: last && page.length > limit ? encodeListCursor([last.checks, last.last_us, last.target], signature) : undefined,
    };
  }

  // Every window's totals and top targets (the 24h to 30d windows aggregate their hourly sums),
  // computed at most once per SCORE_CACHE_MS and shared (cached-figure.ts); demand counted or
  // committed by this process shows in GET /api/demand within AGGREGATE_SETTLE_MS.
  const demandWindows = cachedFigures(
    (_key, at) =>
      Promise.all(
        DEMAND_WINDOWS.map(async (w) => {
          const since = w.ms === null ? null : new Date(at.getTime() - w.ms);
          const [totals, top] = await Promise.all([demand.totals(since), demand.topTargets(since, DEMAND_TOP_TARGETS)]);
          return { totals, top };
        }),
      ),
    { freshMs: SCORE_CACHE_MS, staleMs: RANKED_STALE_MS },
  );
  onDemandRecorded(db, () => demandWindows.touch());

  async function getDemand(req: Partial<GetDemandRequest> = {}, _ctx?: CallContext): Promise<MessageInitShape<typeof GetDemandResponseSchema>> {
    if (req.window !== undefined && req.window !== '') return getDemandPage(req);
    if ((req.cursor !== undefined && req.cursor !== '') || req.limit !== undefined) throw invalidArgument('cursor and limit page the targets of one window: give window too (24h, 7d, 30d or alltime)');
    const at = now();
    const figures = await demandWindows.get('all', at);
    const windows = await Promise.all(
      DEMAND_WINDOWS.map(async (w, i) => {
        const { totals, top } = figures[i]!;
        return {
          window: w.window,
          totalChecks: totals.total,
          uniqueTargets: totals.unique_targets,
          verdictMix: mixOf(totals),
          servers: top.map(serverOf),
        };
      }),
    );
    const all = windows[windows.length - 1]!;
    return {
      generatedAt: at.toISOString(),
      totalPreflightChecks: all.totalChecks,
      uniqueTargets: all.uniqueTargets,
      verdictMix: all.verdictMix,
      windows,
      note: 'Pre-flight checks are demand signals only; they never feed trust scores.',
    };
  }

  return {
    preflight,
    assess,
    getDemand,
    /** Writes the demand counted in memory and stops its periodic write (service close). */
    close: () => demandRows.close(),
  };
}

export type PreflightService = ReturnType<typeof createPreflightService>;
