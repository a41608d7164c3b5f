// Anomaly flags (docs/scoring.md "Anomalies"). Each flag compares the server's recent hours with
// its own history using a robust statistic, never a single sample. Pure: hourly rollups and the
// clock in, flags out.
import { sourceFamily } from './scoring.js';

export const HOUR_MS = 3_600_000;
/** Recent window: the current hour and the two before it. */
export const RECENT_HOURS = 3;
/** History: the 7 days before the recent window. */
export const HISTORY_HOURS = 168;
/** History hours with reports needed before any flag can be raised. */
export const MIN_HISTORY_HOURS = 12;
/** Reports in the recent window needed to judge rates and latency. */
export const MIN_RECENT_REPORTS = 10;

export interface HourRollup {
  bucket: Date;
  n: number;
  successes: number;
  latency_sum: number;
  n_5xx: number;
}

export type AnomalyFlag = 'latency_spike' | 'error_rate_spike' | 'burst_5xx' | 'volume_drop';

export interface AnomalyResult {
  flags: AnomalyFlag[];
  /** Why each test did or did not fire (numbers behind the decision). */
  details: Record<string, number | string | null>;
}

export function hourStart(t: Date): number {
  return Math.floor(t.getTime() / HOUR_MS) * HOUR_MS;
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Median absolute deviation, scaled to estimate a standard deviation for normal data. */
export function mad(xs: readonly number[]): number {
  const m = median(xs);
  return 1.4826 * median(xs.map((x) => Math.abs(x - m)));
}

/** One-sided binomial z statistic of x successes out of n against rate p0. */
export function binomialZ(x: number, n: number, p0: number): number {
  const p = Math.min(0.99, Math.max(0.01, p0));
  return (x - n * p) / Math.sqrt(n * p * (1 - p));
}

/** P(X <= k) for X ~ Poisson(lambda). */
export function poissonCdf(k: number, lambda: number): number {
  let term = Math.exp(-lambda);
  let sum = term;
  for (let i = 1; i <= k; i++) {
    term *= lambda / i;
    sum += term;
  }
  return Math.min(1, sum);
}

export const THRESHOLDS = {
  /** Latency: recent mean above median + 4 robust SDs and at least 50% above the median. */
  latencyRobustZ: 4,
  latencyMinRatio: 1.5,
  /** Errors: binomial z >= 3 and at least 15 points above the historical error rate. */
  errorZ: 3,
  errorMinIncrease: 0.15,
  /** 5xx: at least 5 in the window, binomial z >= 3 and at least 10 points above history. */
  burstMinCount: 5,
  burstZ: 3,
  burstMinIncrease: 0.1,
  /** Volume: median hourly volume >= 5, recent complete hours <= 25% of it, Poisson p < 0.001. */
  volumeMinHourly: 5,
  volumeMaxRatio: 0.25,
  volumeP: 0.001,
} as const;

export function detectAnomalies(hours: readonly HourRollup[], now: Date): AnomalyResult {
  const current = hourStart(now);
  const recentStart = current - (RECENT_HOURS - 1) * HOUR_MS;
  const historyStart = recentStart - HISTORY_HOURS * HOUR_MS;
  const recent = hours.filter((h) => h.bucket.getTime() >= recentStart && h.bucket.getTime() <= current);
  const history = hours.filter((h) => h.bucket.getTime() >= historyStart && h.bucket.getTime() < recentStart && h.n > 0);
  const flags: AnomalyFlag[] = [];
  const details: AnomalyResult['details'] = { history_hours: history.length, recent_reports: 0 };
  if (history.length < MIN_HISTORY_HOURS) {
    details.status = 'insufficient_history';
    return { flags, details };
  }
  const rn = recent.reduce((s, h) => s + h.n, 0);
  details.recent_reports = rn;
  const hn = history.reduce((s, h) => s + h.n, 0);

  if (rn >= MIN_RECENT_REPORTS) {
    // Latency spike: recent mean against the spread of historical hourly means.
    const hourlyMeans = history.filter((h) => h.n >= 3).map((h) => h.latency_sum / h.n);
    if (hourlyMeans.length >= MIN_HISTORY_HOURS) {
      const med = median(hourlyMeans);
      const spread = mad(hourlyMeans);
      const recentMean = recent.reduce((s, h) => s + h.latency_sum, 0) / rn;
      const threshold = Math.max(med + THRESHOLDS.latencyRobustZ * spread, med * THRESHOLDS.latencyMinRatio);
      details.latency_recent_ms = Math.round(recentMean);
      details.latency_threshold_ms = Math.round(threshold);
      if (recentMean > threshold) flags.push('latency_spike');
    }
    // Error-rate spike: recent failures against the historical failure rate.
    const p0 = (hn - history.reduce((s, h) => s + h.successes, 0)) / hn;
    const failures = rn - recent.reduce((s, h) => s + h.successes, 0);
    const z = binomialZ(failures, rn, p0);
    details.error_rate_recent = Math.round((failures / rn) * 1000) / 1000;
    details.error_rate_history = Math.round(p0 * 1000) / 1000;
    if (z >= THRESHOLDS.errorZ && failures / rn - p0 >= THRESHOLDS.errorMinIncrease) flags.push('error_rate_spike');
  }

  // 5xx burst: share of 5xx statuses against history.
  const r5 = recent.reduce((s, h) => s + h.n_5xx, 0);
  if (r5 >= THRESHOLDS.burstMinCount && rn > 0) {
    const p5 = history.reduce((s, h) => s + h.n_5xx, 0) / hn;
    if (binomialZ(r5, rn, p5) >= THRESHOLDS.burstZ && r5 / rn - p5 >= THRESHOLDS.burstMinIncrease) flags.push('burst_5xx');
  }
  details.recent_5xx = r5;

  // Volume drop: the complete hours of the recent window against the median hourly volume of the history span
  // (hours without reports count as zero from the first historical report on).
  const firstHist = Math.min(...history.map((h) => h.bucket.getTime()));
  // The complete hours of the recent window (the current hour is still filling up).
  const completeStart = recentStart;
  const completeHours = RECENT_HOURS - 1;
  const spanHours = Math.round((completeStart - firstHist) / HOUR_MS);
  const perHour = new Map(history.map((h) => [h.bucket.getTime(), h.n]));
  const counts: number[] = [];
  for (let i = 0; i < spanHours; i++) counts.push(perHour.get(firstHist + i * HOUR_MS) ?? 0);
  const typical = median(counts);
  const observed = hours
    .filter((h) => h.bucket.getTime() >= completeStart && h.bucket.getTime() < current)
    .reduce((s, h) => s + h.n, 0);
  const expected = typical * completeHours;
  details.volume_recent = observed;
  details.volume_expected = expected;
  if (
    spanHours >= 24 &&
    typical >= THRESHOLDS.volumeMinHourly &&
    observed <= THRESHOLDS.volumeMaxRatio * expected &&
    poissonCdf(observed, expected) < THRESHOLDS.volumeP
  ) {
    flags.push('volume_drop');
  }
  return { flags, details };
}

/** One source's hourly rollup (telemetry_hourly row). */
export interface SourceHourRollup extends HourRollup {
  source: string;
}

/** Sums per-source hourly rollups into one rollup per hour. */
export function sumBySource(rows: readonly SourceHourRollup[]): HourRollup[] {
  const by = new Map<number, HourRollup>();
  for (const r of rows) {
    const k = r.bucket.getTime();
    const h = by.get(k) ?? { bucket: new Date(k), n: 0, successes: 0, latency_sum: 0, n_5xx: 0 };
    h.n += Number(r.n);
    h.successes += Number(r.successes);
    h.latency_sum += Number(r.latency_sum);
    h.n_5xx += Number(r.n_5xx);
    by.set(k, h);
  }
  return [...by.values()].sort((a, b) => a.bucket.getTime() - b.bucket.getTime());
}

/** The source family with the most reports in [from, to) (ties: the first by name). */
function topFamily(rows: readonly SourceHourRollup[], from: number, to: number): string | undefined {
  const per = new Map<string, number>();
  for (const r of rows) {
    const t = r.bucket.getTime();
    if (t >= from && t < to) per.set(sourceFamily(r.source), (per.get(sourceFamily(r.source)) ?? 0) + Number(r.n));
  }
  let best: string | undefined;
  let bestN = -1;
  for (const [s, n] of [...per.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1))) if (n > bestN) [best, bestN] = [s, n];
  return best;
}

/**
 * Source-robust anomaly detection (docs/integrity.md): a flag stands only when it also fires
 * without the most active source family (sourceFamily: one network's address and keys) of the
 * recent window and without the most active family of the history. So no single source can raise a flag alone, neither by flooding the recent hours (a
 * fake error spike) nor by flooding the history and stopping (a fake volume drop); one reporter
 * alone never raises any flag.
 */
export function detectAnomaliesRobust(rows: readonly SourceHourRollup[], now: Date): AnomalyResult {
  const all = detectAnomalies(sumBySource(rows), now);
  const recentStart = hourStart(now) - (RECENT_HOURS - 1) * HOUR_MS;
  const historyStart = recentStart - HISTORY_HOURS * HOUR_MS;
  const sources = new Set(rows.map((r) => sourceFamily(r.source))).size;
  const details: AnomalyResult['details'] = Object.assign({}, all.details, { sources });
  if (all.flags.length === 0) return { flags: [], details };
  let flags = all.flags;
  const candidates = new Set([topFamily(rows, recentStart, hourStart(now) + HOUR_MS), topFamily(rows, historyStart, recentStart)].filter((s): s is string => s !== undefined));
  for (const s of candidates) {
    const without = detectAnomalies(sumBySource(rows.filter((r) => sourceFamily(r.source) !== s)), now);
    flags = flags.filter((f) => without.flags.includes(f));
  }
  const dropped = all.flags.filter((f) => !flags.includes(f));
  if (dropped.length > 0) details.uncorroborated_flags = dropped.join(',');
  return { flags, details };
}
