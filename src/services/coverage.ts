// The coverage report behind /atlas/report: what the index covers (servers per category, evidence,
// rated vs unrated) next to what agents ask about (pre-flight demand). Reads only; the scores come
// from the trust engine, the demand from the pre-flight demand table.
import { staleReads } from '../db/index.js';
import { demandStore, onDemandRecorded } from '../store/demand.js';
import type { RankedServer } from '../store/scores.js';
import { serverStore, type ServerRow } from '../store/servers.js';
import { onTelemetryCommitted } from '../store/telemetry.js';
import { cachedFigures } from './cached-figure.js';
import type { ServiceDeps } from './context.js';
import { isRated, type TrustService } from './trust.js';
import { RANKED_STALE_MS, SCORE_CACHE_MS } from './trust-engine.js';

/** How many of the most-checked targets the report lists. */
export const COVERAGE_TOP_TARGETS = 20;

export type TargetCoverage = 'rated' | 'unrated' | 'untracked';

export function createCoverageService({ db }: ServiceDeps, trust: Pick<TrustService, 'engine' | 'getCoverage'>) {
  const demand = demandStore(staleReads(db));
  const servers = serverStore(db);

  // The demand half of the report (all-time sums per target, migration 1560) and the tracked
  // servers its top targets name, computed at most once per SCORE_CACHE_MS and shared
  // (cached-figure.ts): demand or evidence recorded (a catalogue import tracking a target
  // included) shows in it within AGGREGATE_SETTLE_MS.
  const demandFigures = cachedFigures(
    async () => {
      const [byCategory, top, totals] = await Promise.all([demand.checksByCategory(null), demand.topTargets(null, COVERAGE_TOP_TARGETS), demand.totals(null)]);
      const urls = [...new Set(top.map((t) => t.server_url).filter((u): u is string => u !== null))];
      const tracked = new Map<string, ServerRow>();
      for (const r of await Promise.all(urls.map((u) => servers.byUrl(u)))) if (r) tracked.set(r.url, r);
      return { byCategory, top, totals, tracked };
    },
    { freshMs: SCORE_CACHE_MS, staleMs: RANKED_STALE_MS },
  );
  onDemandRecorded(db, () => demandFigures.touch());
  onTelemetryCommitted(db, () => demandFigures.touch());

  async function getCoverageReport() {
    // Tracked / rated / unrated per category come from the trust service's one count (the same
    // figures /api/stats shows); this report only sets pre-flight demand beside them.
    const index = await trust.getCoverage(null);
    const at = index.at;
    const [ranked, { byCategory, top, totals, tracked }] = await Promise.all([trust.engine.ranked(null, at), demandFigures.get('all', at)]);
    const byUrl = new Map<string, Pick<RankedServer, 'name' | 'slug' | 'category' | 'n' | 'trust_score' | 'verdict'>>(ranked.map((r) => [r.url, r]));
    // Targets tracked without evidence are not among the ranked rows (issue 23): read by URL.
    for (const r of tracked.values()) if (!byUrl.has(r.url)) byUrl.set(r.url, { name: r.name, slug: r.slug, category: r.category, n: 0, trust_score: null, verdict: null });
    const cats = new Map<string, { category: string; servers: number; rated: number; unrated: number; interactions: number; preflightChecks: number }>();
    const cat = (name: string) => {
      let c = cats.get(name);
      if (!c) cats.set(name, (c = { category: name, servers: 0, rated: 0, unrated: 0, interactions: 0, preflightChecks: 0 }));
      return c;
    };
    for (const c of index.categories) Object.assign(cat(c.name), { servers: c.servers, rated: c.rated, unrated: c.unrated, interactions: c.interactions });
    let untrackedChecks = 0;
    for (const d of byCategory) {
      if (d.category === null) untrackedChecks += Number(d.checks);
      else cat(d.category).preflightChecks += Number(d.checks);
    }
    const categories = [...cats.values()].sort((a, b) => b.servers - a.servers || b.preflightChecks - a.preflightChecks || (a.category < b.category ? -1 : 1));
    const targets = top.map((t) => {
      const server = t.server_url ? byUrl.get(t.server_url) : undefined;
      const coverage: TargetCoverage = !server ? 'untracked' : isRated(server) ? 'rated' : 'unrated';
      return {
        target: t.target,
        name: server?.name ?? t.name ?? t.target,
        slug: server?.slug,
        category: server?.category,
        checks: Number(t.checks),
        lastCheckedAt: t.last_checked_at,
        coverage,
        trustScore: coverage === 'rated' ? server!.trust_score! : undefined,
        verdict: coverage === 'rated' ? server!.verdict! : 'UNRATED',
      };
    });
    return {
      generatedAt: at,
      totals: {
        servers: index.totals.servers,
        rated: index.totals.rated,
        unrated: index.totals.unrated,
        interactions: index.totals.interactions,
        preflightChecks: Number(totals.total),
        preflightChecksUntracked: untrackedChecks,
        uniqueTargets: Number(totals.unique_targets),
      },
      categories,
      targets,
    };
  }

  return { getCoverageReport };
}

export type CoverageService = ReturnType<typeof createCoverageService>;
