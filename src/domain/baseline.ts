// Category baselines (SPEC 2.1 category_baseline; docs/scoring.md "Category baselines").
import { addHistograms, emptyHistogram, latencyP95 } from './latency-histogram.js';
import { combineSources, type SourceAccumulator } from './scoring.js';

/** Servers need this many independent sources to shape their category's baseline (docs/integrity.md). */
export const BASELINE_MIN_SOURCES = 2;

/** Plain observed totals of one server (from its rollups). */
export interface ServerTotals {
  n: number;
  successes: number;
  latency_sum: number;
  hist: readonly number[];
}

export interface CategoryBaselineValue {
  category: string;
  avg_latency_ms: number;
  p95_latency_ms: number;
  avg_success_rate: number;
  server_count: number;
}

/** One server's source-robust figures (combineSources) plus its latency histogram. */
export interface RobustServerFigures {
  /** Independent sources (agents). */
  sources: number;
  /** Their source families (sourceFamily); absent: the server's sources are nobody else's. */
  families?: readonly string[];
  /** Any evidence at all, the observatory's own probes included (absent: same as sources > 0). */
  has_evidence?: boolean;
  success_rate: number;
  mean_latency: number;
  hist: readonly number[];
}

/** A server's figures from its per-source evidence, as the scoring model sees them at `now`. */
export function robustServerFigures(evidence: readonly SourceAccumulator[], hist: readonly number[], now: Date): RobustServerFigures {
  const ev = combineSources(evidence, now);
  return { sources: ev.sources, families: ev.families, has_evidence: ev.weight > 0, success_rate: ev.success_rate, mean_latency: ev.mean_latency, hist };
}

/**
 * Each server's weight in its category's baseline: every independent source family has one vote,
 * split equally among the baseline servers it has evidence for, and a server weighs the votes it
 * receives. Two addresses that corroborate forty decoy servers of their own cast two votes in
 * all, not forty servers' worth; servers reported by sources nobody else shares weigh one vote
 * per source. A server with no independent family (the observatory's probes alone), or whose
 * families are not known, weighs one vote.
 */
export function familyVotes(servers: readonly RobustServerFigures[]): number[] {
  const spread = new Map<string, number>();
  for (const s of servers) for (const f of s.families ?? []) spread.set(f, (spread.get(f) ?? 0) + 1);
  return servers.map((s) => {
    const families = s.families ?? [];
    return families.length === 0 ? 1 : families.reduce((w, f) => w + 1 / spread.get(f)!, 0);
  });
}

/**
 * The baseline from source-robust evidence: each server enters with its source-robust success
 * rate and latency, and only servers with at least BASELINE_MIN_SOURCES independent sources count
 * (all servers with evidence when none has that many), so one reporter flooding a server of its
 * own cannot move the bar every other server of the category is measured against. The means are
 * weighted by familyVotes, so a few sources cannot move it by creating many servers either.
 */
export function robustCategoryBaseline(category: string, servers: readonly RobustServerFigures[], serverCount: number): CategoryBaselineValue {
  const withEvidence = servers.filter((s) => s.has_evidence ?? s.sources > 0);
  const corroborated = withEvidence.filter((s) => s.sources >= BASELINE_MIN_SOURCES);
  const use = corroborated.length > 0 ? corroborated : withEvidence;
  if (use.length === 0) return { category, avg_latency_ms: 0, p95_latency_ms: 0, avg_success_rate: 0, server_count: serverCount };
  const votes = familyVotes(use);
  const total = votes.reduce((s, w) => s + w, 0);
  const mean = (of: (x: RobustServerFigures) => number) => use.reduce((s, x, i) => s + of(x) * votes[i]!, 0) / total;
  const hist = use.reduce<number[]>((h, x) => addHistograms(h, x.hist), emptyHistogram());
  return {
    category,
    avg_latency_ms: Math.round(mean((x) => x.mean_latency) * 10) / 10,
    p95_latency_ms: latencyP95(hist) ?? 0,
    avg_success_rate: Math.round(mean((x) => x.success_rate) * 10000) / 10000,
    server_count: serverCount,
  };
}

/**
 * Plain (not source-robust) baseline from all-time totals. Mean of the servers' mean latencies and success rates (each server counts once, however busy),
 * p95 over all the category's reports (merged histograms). `serverCount` counts every tracked
 * server of the category, including ones without evidence.
 */
export function categoryBaseline(category: string, servers: readonly ServerTotals[], serverCount: number): CategoryBaselineValue {
  const withEvidence = servers.filter((s) => s.n > 0);
  if (withEvidence.length === 0) return { category, avg_latency_ms: 0, p95_latency_ms: 0, avg_success_rate: 0, server_count: serverCount };
  const k = withEvidence.length;
  const avgLatency = withEvidence.reduce((s, x) => s + x.latency_sum / x.n, 0) / k;
  const avgSuccess = withEvidence.reduce((s, x) => s + x.successes / x.n, 0) / k;
  const hist = withEvidence.reduce<number[]>((h, x) => addHistograms(h, x.hist), emptyHistogram());
  return {
    category,
    avg_latency_ms: Math.round(avgLatency * 10) / 10,
    p95_latency_ms: latencyP95(hist) ?? 0,
    avg_success_rate: Math.round(avgSuccess * 10000) / 10000,
    server_count: serverCount,
  };
}
