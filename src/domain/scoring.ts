// The trust score (first model; docs/scoring.md). Pure: evidence and baseline in, score out.
import { roundScore } from './verdict.js';

export interface ScoreEvidence {
  total: number;
  successes: number;
  avg_latency_ms: number;
}

export interface ScoreBaseline {
  avg_latency_ms: number;
}

/** Prior strength: this many pseudo-observations at a 50% success rate pull small samples toward 50. */
export const PRIOR_WEIGHT = 10;
export const SUCCESS_WEIGHT = 0.8;
export const LATENCY_WEIGHT = 0.2;

export interface ScoreResult {
  trust_score: number;
  breakdown: Record<string, number | string>;
}

/**
 * Latency quality in [0, 1]: 1 at or below the category mean, falling by a quarter for every
 * doubling above it. Without a baseline (first server of a category) latency is neutral (0.5).
 */
export function latencyQuality(avgLatency: number, baselineLatency: number): number {
  if (!(baselineLatency > 0)) return 0.5;
  const ratio = avgLatency / baselineLatency;
  if (ratio <= 1) return 1;
  return Math.max(0, 1 - 0.25 * Math.log2(ratio));
}

export function computeTrustScore(e: ScoreEvidence, b: ScoreBaseline): ScoreResult {
  const successEstimate = (e.successes + PRIOR_WEIGHT * 0.5) / (e.total + PRIOR_WEIGHT);
  // Latency is only as trustworthy as the sample: it shrinks toward neutral like the success rate.
  const confidence = e.total / (e.total + PRIOR_WEIGHT);
  const latency = e.total === 0 ? 0.5 : 0.5 + (latencyQuality(e.avg_latency_ms, b.avg_latency_ms) - 0.5) * confidence;
  const raw = 100 * (SUCCESS_WEIGHT * successEstimate + LATENCY_WEIGHT * latency);
  return {
    trust_score: roundScore(raw),
    breakdown: {
      model: 'shrunk-success-v0',
      success_component: roundScore(100 * successEstimate),
      latency_component: roundScore(100 * latency),
      success_weight: SUCCESS_WEIGHT,
      latency_weight: LATENCY_WEIGHT,
      prior_weight: PRIOR_WEIGHT,
      evidence_count: e.total,
      confidence: Math.round(confidence * 1000) / 1000,
    },
  };
}
