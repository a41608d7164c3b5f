// The trust engine: gathers a server's rollups, runs the pure model (src/domain) and keeps the
// score cache and hourly snapshots up to date. Every read of a score goes through here.
import type { Queryable } from '../db/index.js';
import { detectAnomaliesRobust, hourStart, HISTORY_HOURS, HOUR_MS, RECENT_HOURS, type AnomalyResult } from '../domain/anomaly.js';
import { robustCategoryBaseline, robustServerFigures, type CategoryBaselineValue } from '../domain/baseline.js';
import { computeTrustScore, type Breakdown } from '../domain/scoring.js';
import { verdictFor, type PreflightVerdict } from '../domain/verdict.js';
import { scoreStore, type RankedServer } from '../store/scores.js';
import type { ServerRow } from '../store/servers.js';
import { telemetryStore, type StoredTotals } from '../store/telemetry.js';

/** A cached score older than this is recomputed on the next read even without new reports. */
export const SCORE_MAX_AGE_MS = 5 * 60_000;

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

export function createTrustEngine(db: Queryable) {
  const telemetry = telemetryStore(db);
  const scores = scoreStore(db);

  /** Category baselines from source-robust per-server figures as of `at` (docs/integrity.md). */
  async function baselines(categories: Iterable<string>, at: Date): Promise<Map<string, CategoryBaselineValue>> {
    const out = new Map<string, CategoryBaselineValue>();
    for (const c of new Set(categories)) {
      const [{ servers, serverCount }, evidence] = await Promise.all([telemetry.categoryTotals(c), telemetry.categoryEvidence(c)]);
      const figures = servers.map((t) => robustServerFigures(evidence.get(t.server_id) ?? [], t.hist, at));
      out.set(c, robustCategoryBaseline(c, figures, serverCount));
    }
    return out;
  }

  /** Computes the scores of the given servers as of `at` and records them (cache and snapshot). */
  async function compute(servers: readonly ServerRow[], at: Date): Promise<Map<number, ComputedScore>> {
    const ids = servers.map((s) => s.id);
    const from = new Date(hourStart(at) - (HISTORY_HOURS + RECENT_HOURS) * HOUR_MS);
    const [totals, evidence, hourly, base] = await Promise.all([
      telemetry.totals(ids),
      telemetry.evidence(ids),
      telemetry.hourlyBySource(ids, from, at),
      baselines(servers.map((s) => s.category), at),
    ]);
    const out = new Map<number, ComputedScore>();
    for (const server of servers) {
      const t = totals.get(server.id) ?? null;
      const baseline = base.get(server.category)!;
      const anomaly = detectAnomaliesRobust(hourly.get(server.id) ?? [], at);
      const { trust_score, breakdown } = computeTrustScore({
        sources: evidence.get(server.id) ?? [],
        baselineLatencyMs: baseline.avg_latency_ms,
        anomalyFlags: anomaly.flags,
        now: at,
      });
      const verdict: PreflightVerdict = t && t.n > 0 ? verdictFor(trust_score) : 'UNRATED';
      out.set(server.id, { server, trust_score, verdict, breakdown, anomaly, totals: t, baseline, computed_at: at });
    }
    await scores.save(
      [...out.values()].map((c) => ({
        server_id: c.server.id,
        trust_score: c.trust_score,
        verdict: c.verdict,
        anomaly_flags: c.anomaly.flags,
        evidence_reports: c.totals?.n ?? 0,
        computed_at: at,
        bucket: new Date(hourStart(at)),
      })),
    );
    return out;
  }

  return {
    compute,
    baselines,

    /** Recomputes every stale cached score (new reports, or older than SCORE_MAX_AGE_MS). */
    async refresh(at: Date): Promise<number> {
      const stale = new Set(await scores.staleServerIds(new Date(at.getTime() - SCORE_MAX_AGE_MS)));
      if (stale.size === 0) return 0;
      const rows = (await scores.ranked(null)).filter((r) => stale.has(r.id));
      // Batches keep each statement's arrays and result sets small on large indexes.
      for (let i = 0; i < rows.length; i += 500) await compute(rows.slice(i, i + 500).map(serverRowOf), at);
      return rows.length;
    },

    /** Fresh ranked list: refreshes stale scores, then reads the cache. */
    async ranked(category: string | null, at: Date): Promise<RankedServer[]> {
      await this.refresh(at);
      return scores.ranked(category);
    },

    /** A server's current score and verdict, from the cache when it is fresh. */
    async scoreFor(server: ServerRow, at: Date): Promise<ScoreSummary> {
      const [cached, totals] = await Promise.all([scores.current([server.id]), telemetry.totals([server.id])]);
      const c = cached.get(server.id);
      const t = totals.get(server.id);
      const fresh = c && c.computed_at.getTime() >= at.getTime() - SCORE_MAX_AGE_MS && c.evidence_reports === (t?.n ?? 0);
      if (c && fresh) {
        return { trust_score: c.trust_score, verdict: c.verdict as PreflightVerdict, total_interactions: t?.n ?? 0, anomaly_flags: c.anomaly_flags, computed_at: c.computed_at };
      }
      const s = (await compute([server], at)).get(server.id)!;
      return { trust_score: s.trust_score, verdict: s.verdict, total_interactions: s.totals?.n ?? 0, anomaly_flags: s.anomaly.flags, computed_at: at };
    },
  };
}

export function serverRowOf(r: RankedServer): ServerRow {
  return { id: r.id, url: r.url, name: r.name, slug: r.slug, category: r.category, registered_at: r.registered_at };
}

export type TrustEngine = ReturnType<typeof createTrustEngine>;
