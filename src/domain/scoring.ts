// The trust score model "source-robust-v2" (docs/scoring.md). Pure: evidence, baseline,
// anomaly flags and the clock in; score and an additive breakdown out. Same inputs, same output.
import { roundScore } from './verdict.js';

/** Evidence loses half its weight every 7 days. */
export const HALF_LIFE_HOURS = 168;
/** Prior strength: this many pseudo-observations at a 50% success rate pull small samples toward 50. */
export const PRIOR_WEIGHT = 10;
/** Success rate assumed before any evidence (only shown in the breakdown; the prior score is 50). */
export const PRIOR_SUCCESS_RATE = 0.5;
/** Points available to the success estimate and to latency; together 100. */
export const SUCCESS_POINTS = 80;
export const LATENCY_POINTS = 20;
/** Every doubling of latency above the category mean costs this share of the latency points. */
export const LATENCY_LOSS_PER_DOUBLING = 0.25;
/**
 * Per-source saturation: one source's decayed weight counts at most SOURCE_CAP pseudo-reports
 * (an address source) or KEYED_SOURCE_CAP (a registered API key, 1.5x: a key is one stable
 * identity across days, while an address becomes a new source every day; docs/integrity.md).
 */
export const SOURCE_CAP = 12;
export const KEYED_SOURCE_CAP = 18;
/**
 * The observatory's own probes (active observation, docs/observation.md) are one source,
 * `observatory:probe`, saturating at half an address source. Whenever independent sources (agents)
 * have evidence, its weight counts at most OBSERVATORY_SHARE_OF_INDEPENDENT of theirs together,
 * so it never holds more than a third of the total: the weighted medians that anchor the success
 * and latency estimates are always decided by the agents, and the probes can never outvote them.
 */
export const OBSERVATORY_SOURCE = 'observatory:probe';
export const OBSERVATORY_SOURCE_CAP = 6;
export const OBSERVATORY_SHARE_OF_INDEPENDENT = 0.5;
/**
 * Robust combination of per-source success rates (a Huber-type M-estimate around the weighted
 * median): a source's rate is clipped to centre +/- (HUBER_K x sqrt(v / weight) + CLIP_SLACK),
 * v = max(VARIANCE_FLOOR, centre x (1 - centre)), and the clipped rates are averaged, by weight,
 * ROBUST_ITERATIONS times. A source whose rate its own sample size explains is never clipped.
 */
export const HUBER_K = 2;
export const CLIP_SLACK = 0.05;
export const VARIANCE_FLOOR = 0.05;
export const ROBUST_ITERATIONS = 8;
/** Points an active anomaly flag costs. */
export const ANOMALY_PENALTIES: Readonly<Record<string, number>> = {
  latency_spike: 8,
  error_rate_spike: 15,
  burst_5xx: 10,
  volume_drop: 5,
};

/** Decayed running sums of one source's reports about one server, valid at `updated_at`. */
export interface SourceAccumulator {
  source: string;
  weight: number;
  successes: number;
  latency_sum: number;
  reports: number;
  updated_at: Date;
}

/** Decay factor for evidence `ageMs` old: 2^(-age / half-life). Future evidence counts fully. */
export function decayFactor(ageMs: number): number {
  if (!(ageMs > 0)) return 1;
  return Math.pow(2, -ageMs / (HALF_LIFE_HOURS * 3_600_000));
}

/** The accumulators brought forward to `now`. */
export function decayTo(acc: readonly SourceAccumulator[], now: Date): SourceAccumulator[] {
  return acc.map((a) => {
    const f = decayFactor(now.getTime() - a.updated_at.getTime());
    return { ...a, weight: a.weight * f, successes: a.successes * f, latency_sum: a.latency_sum * f, updated_at: now };
  });
}

export interface CombinedEvidence {
  /** Sum of the saturated per-source weights (pseudo-report count). */
  weight: number;
  /** Source-robust success rate (PRIOR_SUCCESS_RATE without evidence). */
  success_rate: number;
  /** Weighted median of the per-source mean latencies (0 without evidence). */
  mean_latency: number;
  /** Raw reports behind the accumulators. */
  reports: number;
  /** Independent source families with any weight left (sourceFamily; the observatory's own probes are not independent). */
  sources: number;
  /** Those families' keys, sorted (the category baseline gives each family one vote). */
  families: string[];
  /** Weight the observatory's own probes contribute (after their caps). */
  observatory_weight: number;
  /** Of which families speaking through a registered API key. */
  keyed_sources: number;
  /** Weight removed by the per-source saturation. */
  capped_weight: number;
  /** Largest share of the combined weight held by one source family (0..1). */
  max_source_share: number;
}

/** A source is keyed when it is a registered API key (src/services/report-source.ts). */
export const isKeyedSource = (source: string) => source.startsWith('key:');
/** A source is the observatory's own when it is one of its probes (never an agent). */
export const isObservatorySource = (source: string) => source.startsWith('observatory:');
export const sourceCap = (source: string) => (isKeyedSource(source) ? KEYED_SOURCE_CAP : isObservatorySource(source) ? OBSERVATORY_SOURCE_CAP : SOURCE_CAP);

/**
 * The source of a report through a registered API key: `key:` + the first 32 hex digits of the
 * key's SHA-256, then `@` + its family when it has one: the keyed hash of the network the report
 * came from that day, which is that network's `addr:` source (src/services/report-source.ts).
 * Reports stored before 2026-11-28 name the network the key was registered from instead; a
 * report with no client address (an in-process caller) has none.
 */
export function keySource(keyHash: string, family: string | null): string {
  return `key:${keyHash.slice(0, 32)}${family ? `@${family}` : ''}`;
}

/**
 * The family a source belongs to (docs/integrity.md): everything one network speaks through on
 * one day is one family, so the model counts it as one source. `addr:X` and every key reporting
 * from that network that day (`key:...@X`) are the family `net:X`; a key without a family is its
 * own; the observatory's probes and in-process callers are their own.
 */
export function sourceFamily(source: string): string {
  if (source.startsWith('addr:')) return `net:${source.slice(5)}`;
  if (isKeyedSource(source)) {
    const at = source.indexOf('@');
    return at === -1 ? source : `net:${source.slice(at + 1)}`;
  }
  return source;
}

/** Weighted median: the smallest value at which the cumulative weight reaches half (mean of the two at an exact tie). */
export function weightedMedian(items: readonly { value: number; weight: number }[]): number {
  const xs = items.filter((x) => x.weight > 0).sort((a, b) => a.value - b.value);
  const total = xs.reduce((s, x) => s + x.weight, 0);
  if (total <= 0) return 0;
  let acc = 0;
  for (let i = 0; i < xs.length; i++) {
    acc += xs[i]!.weight;
    if (Math.abs(acc - total / 2) < 1e-9 * total && i + 1 < xs.length) return (xs[i]!.value + xs[i + 1]!.value) / 2;
    if (acc > total / 2) return xs[i]!.value;
  }
  return xs[xs.length - 1]!.value;
}

/**
 * Source-robust success rate: start at the weighted median of the per-source rates, then
 * iterate a weighted mean in which every rate is clipped to what its own weight makes
 * plausible around the current centre. Honest sources that agree within sampling noise are
 * averaged as they are; a source far from the others is pulled to the edge of that band, so
 * its influence is at most weight x band / (weight of the others) (docs/integrity.md).
 */
export function robustSuccessRate(items: readonly { rate: number; weight: number }[]): number {
  const xs = items.filter((x) => x.weight > 0);
  const total = xs.reduce((s, x) => s + x.weight, 0);
  if (total <= 0) return PRIOR_SUCCESS_RATE;
  let m = weightedMedian(xs.map((x) => ({ value: x.rate, weight: x.weight })));
  for (let it = 0; it < ROBUST_ITERATIONS; it++) {
    const v = Math.max(VARIANCE_FLOOR, m * (1 - m));
    let sum = 0;
    for (const x of xs) {
      const band = HUBER_K * Math.sqrt(v / x.weight) + CLIP_SLACK;
      sum += x.weight * Math.min(m + band, Math.max(m - band, x.rate));
    }
    m = sum / total;
  }
  return Math.min(1, Math.max(0, m));
}

/**
 * A source's cap, decayed from its last report like the evidence itself, so a source that
 * stopped reporting fades with the half-life however much it once sent. (A module function, not
 * a closure per call: tsx names each closure with Object.defineProperty when it is made.)
 */
function capOf(s: SourceAccumulator, now: Date): number {
  return sourceCap(s.source) * decayFactor(now.getTime() - s.updated_at.getTime());
}

/**
 * Combines sources (any age; decayed here to `now`) so that none dominates: the sources of one
 * family (sourceFamily) are pooled, each family is reduced to its own estimates (success rate,
 * mean latency) and a weight that saturates at its cap (decayed from its last report); the
 * estimates are then combined
 * with robust weighted statistics (robustSuccessRate, weightedMedian).
 */
export function combineSources(sources: readonly SourceAccumulator[], now: Date): CombinedEvidence {
  // Sources of one family (sourceFamily) are pooled into one before saturation: twelve keys
  // reporting from one network weigh what one key weighs. The family's cap is the largest of
  // its members' (a family with a key saturates at the keyed cap).
  const families = new Map<string, { source: string; raw: number; successes: number; latency_sum: number; cap: number; keyed: boolean }>();
  for (const original of sources) {
    const [s] = decayTo([original], now) as [SourceAccumulator];
    if (!(s.weight > 1e-9)) continue;
    const key = sourceFamily(s.source);
    const f = families.get(key) ?? { source: key, raw: 0, successes: 0, latency_sum: 0, cap: 0, keyed: false };
    f.raw += s.weight;
    f.successes += s.successes;
    f.latency_sum += s.latency_sum;
    f.cap = Math.max(f.cap, capOf(original, now));
    f.keyed ||= isKeyedSource(s.source);
    families.set(key, f);
  }
  // Sorted by family key so floating-point sums are identical whatever order rows arrive in.
  const saturated = [...families.values()]
    .sort((a, b) => (a.source < b.source ? -1 : a.source > b.source ? 1 : 0))
    .map((f) => ({ source: f.source, keyed: f.keyed, raw: f.raw, weight: Math.min(f.raw, f.cap), rate: f.successes / f.raw, latency: f.latency_sum / f.raw }));
  // The observatory's probes never outweigh the agents (OBSERVATORY_SHARE_OF_INDEPENDENT).
  const independentWeight = saturated.filter((x) => !isObservatorySource(x.source)).reduce((s, x) => s + x.weight, 0);
  const live = saturated.map((x) =>
    isObservatorySource(x.source) && independentWeight > 0 ? { ...x, weight: Math.min(x.weight, independentWeight * OBSERVATORY_SHARE_OF_INDEPENDENT) } : x,
  );
  const weight = live.reduce((s, x) => s + x.weight, 0);
  return {
    weight,
    success_rate: robustSuccessRate(live),
    mean_latency: weightedMedian(live.map((x) => ({ value: x.latency, weight: x.weight }))),
    reports: sources.reduce((s, x) => s + x.reports, 0),
    sources: live.filter((x) => !isObservatorySource(x.source)).length,
    families: live.filter((x) => !isObservatorySource(x.source)).map((x) => x.source),
    observatory_weight: live.filter((x) => isObservatorySource(x.source)).reduce((s, x) => s + x.weight, 0),
    keyed_sources: live.filter((x) => x.keyed).length,
    capped_weight: live.reduce((s, x) => s + (x.raw - x.weight), 0),
    max_source_share: weight > 0 ? Math.max(...live.map((x) => x.weight)) / weight : 0,
  };
}

/**
 * Latency quality in [0, 1]: 1 at or below the category mean, losing a quarter for every
 * doubling above it. Without a category mean latency is neutral (0.5).
 */
export function latencyQuality(avgLatency: number, baselineLatency: number): number {
  if (!(baselineLatency > 0)) return 0.5;
  const ratio = avgLatency / baselineLatency;
  if (ratio <= 1) return 1;
  return Math.max(0, 1 - LATENCY_LOSS_PER_DOUBLING * Math.log2(ratio));
}

/**
 * Reliability curve: how much of the success points an observed success rate earns. Zero at or
 * below a coin flip (50%), rising quadratically to all of them at 100%: 95% earns 0.81, 90%
 * 0.64, 80% 0.36. A tool that fails one call in five is not trustworthy, so the curve is steep.
 */
export function reliabilityCurve(successRate: number): number {
  const x = Math.min(1, Math.max(0, (successRate - 0.5) / 0.5));
  return x * x;
}

export interface ScoreInput {
  /** Per-source accumulators of the server (any age; decayed here to `now`). */
  sources: readonly SourceAccumulator[];
  /** Mean latency of the server's category (ms); 0 when unknown. */
  baselineLatencyMs: number;
  /** Active anomaly flags. */
  anomalyFlags: readonly string[];
  now: Date;
}

export type Breakdown = Record<string, number | string | string[]>;

export interface ScoreResult {
  trust_score: number;
  breakdown: Breakdown;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * score = 50 x (1 - c) + c x (80 x reliability + 20 x latency quality) - anomaly penalties,
 * with confidence c = W / (W + PRIOR_WEIGHT) for the sum W of the saturated per-source weights:
 * W <= cap x (independent sources), so confidence grows with the number of sources, and one
 * source alone never exceeds c = 12 / 22 (18 / 28 with a registered key).
 */
export function computeTrustScore(input: ScoreInput): ScoreResult {
  const ev = combineSources(input.sources, input.now);
  const confidence = ev.weight / (ev.weight + PRIOR_WEIGHT);
  const successRate = ev.success_rate;
  const reliability = reliabilityCurve(successRate);
  const meanLatency = ev.mean_latency;
  const quality = ev.weight > 0 ? latencyQuality(meanLatency, input.baselineLatencyMs) : 0.5;
  const priorPoints = 50 * (1 - confidence);
  const successPoints = SUCCESS_POINTS * reliability * confidence;
  const latencyPoints = LATENCY_POINTS * quality * confidence;
  const flags = [...new Set(input.anomalyFlags)].sort();
  const penalty = flags.reduce((s, f) => s + (ANOMALY_PENALTIES[f] ?? 0), 0);
  const raw = priorPoints + successPoints + latencyPoints - penalty;
  return {
    trust_score: roundScore(raw),
    breakdown: {
      model: 'source-robust-v2',
      prior_points: r3(priorPoints),
      success_points: r3(successPoints),
      latency_points: r3(latencyPoints),
      anomaly_penalty: penalty,
      anomaly_flags: flags,
      confidence: r3(confidence),
      decayed_success_rate: r3(successRate),
      reliability: r3(reliability),
      latency_quality: r3(quality),
      decayed_mean_latency_ms: r3(meanLatency),
      baseline_latency_ms: r3(input.baselineLatencyMs),
      evidence_reports: ev.reports,
      evidence_weight: r3(ev.weight),
      evidence_capped_weight: r3(ev.capped_weight),
      independent_sources: ev.sources,
      observatory_weight: r3(ev.observatory_weight),
      keyed_sources: ev.keyed_sources,
      max_source_share: r3(ev.max_source_share),
      source_cap: SOURCE_CAP,
      keyed_source_cap: KEYED_SOURCE_CAP,
      observatory_source_cap: OBSERVATORY_SOURCE_CAP,
      half_life_hours: HALF_LIFE_HOURS,
      prior_weight: PRIOR_WEIGHT,
    },
  };
}
