// Category baselines (SPEC 2.1 category_baseline; docs/scoring.md "Category baselines").
import { addHistograms, emptyHistogram, histogramQuantile } from './latency-histogram.js';

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

/**
 * Mean of the servers' mean latencies and success rates (each server counts once, however busy),
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
    p95_latency_ms: histogramQuantile(hist, 0.95) ?? 0,
    avg_success_rate: Math.round(avgSuccess * 10000) / 10000,
    server_count: serverCount,
  };
}
