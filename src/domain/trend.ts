// Deltas, trends and windows (DECISIONS.md "Trust delta"; docs/scoring.md "History").
import { FAIL_THRESHOLD } from './verdict.js';

export const DELTA_WINDOWS = { '24h': 24, '48h': 48, '7d': 168 } as const;
export type DeltaWindow = keyof typeof DELTA_WINDOWS;
export const DEFAULT_DELTA_WINDOW: DeltaWindow = '24h';
/** A move larger than this (in points) makes a server improved or degraded. */
export const DELTA_THRESHOLD = 5;

export function isDeltaWindow(w: string): w is DeltaWindow {
  return Object.prototype.hasOwnProperty.call(DELTA_WINDOWS, w);
}

export interface DeltaInput {
  url: string;
  name: string;
  category: string;
  registered_at: Date;
  trust_score: number | null;
  prev_score: number | null;
}

export interface DeltaGroups {
  servers_new: DeltaInput[];
  servers_improved: (DeltaInput & { delta: number })[];
  servers_degraded: (DeltaInput & { delta: number })[];
  servers_at_risk: DeltaInput[];
}

/** new = first tracked inside the window; improved = delta > +5; degraded = delta < -5; at risk = score < 40. */
export function groupDeltas(servers: readonly DeltaInput[], windowStart: Date): DeltaGroups {
  const g: DeltaGroups = { servers_new: [], servers_improved: [], servers_degraded: [], servers_at_risk: [] };
  for (const s of servers) {
    if (s.registered_at.getTime() > windowStart.getTime()) g.servers_new.push(s);
    if (s.trust_score === null) continue;
    if (s.prev_score !== null && s.registered_at.getTime() <= windowStart.getTime()) {
      const delta = Math.round((s.trust_score - s.prev_score) * 10) / 10;
      if (delta > DELTA_THRESHOLD) g.servers_improved.push(Object.assign({}, s, { delta }));
      else if (delta < -DELTA_THRESHOLD) g.servers_degraded.push(Object.assign({}, s, { delta }));
    }
    if (s.trust_score < FAIL_THRESHOLD) g.servers_at_risk.push(s);
  }
  g.servers_improved.sort((a, b) => b.delta - a.delta);
  g.servers_degraded.sort((a, b) => a.delta - b.delta);
  g.servers_at_risk.sort((a, b) => a.trust_score! - b.trust_score!);
  g.servers_new.sort((a, b) => b.registered_at.getTime() - a.registered_at.getTime());
  return g;
}

export type Trend = 'improving' | 'declining' | 'stable' | 'insufficient_data';
/** Reports needed in each of the two weeks compared. */
export const TREND_MIN_REPORTS = 20;
/** Change in success rate (absolute) that counts as a trend. */
export const TREND_MIN_CHANGE = 0.05;

/** Success rate of the last 7 days against the 7 days before. */
export function reliabilityTrend(last7: { n: number; successes: number }, prev7: { n: number; successes: number }): Trend {
  if (last7.n < TREND_MIN_REPORTS || prev7.n < TREND_MIN_REPORTS) return 'insufficient_data';
  const d = last7.successes / last7.n - prev7.successes / prev7.n;
  if (d > TREND_MIN_CHANGE) return 'improving';
  if (d < -TREND_MIN_CHANGE) return 'declining';
  return 'stable';
}
