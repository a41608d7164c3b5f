// The trust score model "decayed-shrunk-v1" (docs/scoring.md). Pure: evidence, baseline,
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
 * Per-source saturation: one source's decayed weight counts at most
 * max(SOURCE_FLOOR, SOURCE_SHARE x the weight of all other sources together).
 */
export const SOURCE_FLOOR = 15;
export const SOURCE_SHARE = 0.5;
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
  /** Decayed, source-bounded weight of the evidence (pseudo-report count). */
  weight: number;
  successes: number;
  latency_sum: number;
  /** Raw reports behind the accumulators. */
  reports: number;
  /** Sources with any weight left. */
  sources: number;
  /** Weight removed by the per-source saturation. */
  capped_weight: number;
}

/**
 * Combines sources so that none dominates: each source keeps its own success rate and mean
 * latency, but its weight saturates at max(SOURCE_FLOOR, SOURCE_SHARE x others' weight).
 */
export function combineSources(decayed: readonly SourceAccumulator[]): CombinedEvidence {
  const live = decayed.filter((s) => s.weight > 1e-9);
  const total = live.reduce((s, x) => s + x.weight, 0);
  let weight = 0;
  let successes = 0;
  let latency = 0;
  let capped = 0;
  // Sorted by source key so floating-point sums are identical whatever order rows arrive in.
  for (const s of [...live].sort((a, b) => (a.source < b.source ? -1 : a.source > b.source ? 1 : 0))) {
    const cap = Math.max(SOURCE_FLOOR, SOURCE_SHARE * (total - s.weight));
    const scale = s.weight > cap ? cap / s.weight : 1;
    weight += s.weight * scale;
    successes += s.successes * scale;
    latency += s.latency_sum * scale;
    capped += s.weight * (1 - scale);
  }
  return {
    weight,
    successes,
    latency_sum: latency,
    reports: decayed.reduce((s, x) => s + x.reports, 0),
    sources: live.length,
    capped_weight: capped,
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
 * with confidence c = W / (W + PRIOR_WEIGHT) for the decayed, source-bounded evidence weight W.
 */
export function computeTrustScore(input: ScoreInput): ScoreResult {
  const ev = combineSources(decayTo(input.sources, input.now));
  const confidence = ev.weight / (ev.weight + PRIOR_WEIGHT);
  const successRate = ev.weight > 0 ? ev.successes / ev.weight : PRIOR_SUCCESS_RATE;
  const reliability = reliabilityCurve(successRate);
  const meanLatency = ev.weight > 0 ? ev.latency_sum / ev.weight : 0;
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
      model: 'decayed-shrunk-v1',
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
      half_life_hours: HALF_LIFE_HOURS,
      prior_weight: PRIOR_WEIGHT,
    },
  };
}
