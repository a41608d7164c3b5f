// Fixed latency histogram (docs/scoring.md "Latency percentiles"). Rollups keep one count per
// bin instead of every latency, so a p95 over millions of reports is read from ~20 numbers.
// Bin i holds latencies in [LATENCY_BIN_EDGES[i-1], LATENCY_BIN_EDGES[i]) (bin 0 starts at 0);
// the last bin is open-ended.

export const LATENCY_BIN_EDGES: readonly number[] = [
  5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10_000, 20_000, 60_000,
];
export const LATENCY_BINS = LATENCY_BIN_EDGES.length + 1;

export function latencyBin(ms: number): number {
  for (let i = 0; i < LATENCY_BIN_EDGES.length; i++) if (ms < LATENCY_BIN_EDGES[i]!) return i;
  return LATENCY_BIN_EDGES.length;
}

export function emptyHistogram(): number[] {
  return new Array<number>(LATENCY_BINS).fill(0);
}

export function addHistograms(a: readonly number[], b: readonly number[]): number[] {
  const out = emptyHistogram();
  for (let i = 0; i < LATENCY_BINS; i++) out[i] = (a[i] ?? 0) + (b[i] ?? 0);
  return out;
}

/**
 * The q-quantile (0 < q <= 1) estimated from bin counts, interpolating linearly inside the bin
 * that holds it. Null for an empty histogram. The open last bin reports its lower edge.
 */
export function histogramQuantile(counts: readonly number[], q: number): number | null {
  const total = counts.reduce((s, c) => s + c, 0);
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < LATENCY_BINS; i++) {
    const c = counts[i] ?? 0;
    if (c > 0 && seen + c >= rank) {
      const lo = i === 0 ? 0 : LATENCY_BIN_EDGES[i - 1]!;
      if (i === LATENCY_BIN_EDGES.length) return lo;
      const hi = LATENCY_BIN_EDGES[i]!;
      return Math.round((lo + ((rank - seen) / c) * (hi - lo)) * 10) / 10;
    }
    seen += c;
  }
  return LATENCY_BIN_EDGES[LATENCY_BIN_EDGES.length - 1]!;
}

/**
 * THE p95 latency of the observatory (docs/scoring.md "Latency percentiles"): the 0.95-quantile
 * of the latency histogram of the reports in question, interpolated inside its bin, one decimal;
 * null without reports. Every p95 anyone reads (benchmark, behavioral evidence, ERC-8004 evidence,
 * category baselines, the compliance export, agent-query) is this function over the histogram of
 * the reports it covers, so the same reports give the same p95 everywhere.
 */
export function latencyP95(hist: readonly number[]): number | null {
  return histogramQuantile(hist, 0.95);
}
