import { describe, expect, it } from 'vitest';
import { detectAnomalies, HOUR_MS, poissonCdf, type HourRollup } from '../src/domain/anomaly.js';
import { categoryBaseline } from '../src/domain/baseline.js';
import { emptyHistogram, histogramQuantile, latencyBin } from '../src/domain/latency-histogram.js';
import { combineSources, computeTrustScore, SOURCE_CAP, reliabilityCurve, decayFactor, HALF_LIFE_HOURS, type SourceAccumulator } from '../src/domain/scoring.js';
import { groupDeltas, isDeltaWindow, reliabilityTrend } from '../src/domain/trend.js';
import { gradeFor, slaTierFor, verdictFor } from '../src/domain/verdict.js';

const NOW = new Date('2026-03-01T12:30:00Z');

function src(source: string, n: number, successRate: number, latency: number, at = NOW): SourceAccumulator {
  return { source, weight: n, successes: n * successRate, latency_sum: n * latency, reports: n, updated_at: at };
}
const score = (sources: SourceAccumulator[], baseline = 200, flags: string[] = []) =>
  computeTrustScore({ sources, baselineLatencyMs: baseline, anomalyFlags: flags, now: NOW });

describe('bands: verdict, grade and SLA tier at every edge', () => {
  const cases: [number, string, string, string][] = [
    [39.9, 'FAIL', 'F', 'Unrated'],
    [40, 'UNCERTAIN', 'D', 'Bronze'],
    [59.9, 'UNCERTAIN', 'D', 'Bronze'],
    [60, 'PASS', 'C', 'Silver'],
    [74.9, 'PASS', 'C', 'Silver'],
    [75, 'PASS', 'B', 'Gold'],
    [89.9, 'PASS', 'B', 'Gold'],
    [90, 'PASS', 'A', 'Platinum'],
  ];
  it.each(cases)('%d -> %s, grade %s, tier %s', (s, v, g, t) => {
    expect(verdictFor(s)).toBe(v);
    expect(gradeFor(s)).toBe(g);
    expect(slaTierFor(s, 30)).toBe(t);
  });
  it('a tier needs 30 interactions in 30 days', () => {
    expect(slaTierFor(95, 29)).toBe('Unrated');
    expect(slaTierFor(95, 30)).toBe('Platinum');
  });
});

describe('scoring model properties', () => {
  it('with no evidence the score is the prior, 50', () => {
    const r = score([]);
    expect(r.trust_score).toBe(50);
    expect(r.breakdown.evidence_reports).toBe(0);
  });

  it('small samples pull toward 50: one success is far from a perfect score, many successes approach it', () => {
    const one = score([src('a', 1, 1, 100)]).trust_score;
    const many = score([src('a', 15, 1, 100), src('b', 15, 1, 100), src('c', 15, 1, 100), src('d', 15, 1, 100)]).trust_score;
    expect(one).toBeGreaterThan(50);
    expect(one).toBeLessThan(60);
    expect(many).toBeGreaterThan(90);
    const oneFail = score([src('a', 1, 0, 100)]).trust_score;
    expect(oneFail).toBeGreaterThan(40);
    expect(oneFail).toBeLessThan(50);
  });

  it('recent evidence weighs more: the same failures cost less when they are a half-life old', () => {
    const old = new Date(NOW.getTime() - HALF_LIFE_HOURS * HOUR_MS);
    const good = [src('g1', 10, 1, 100), src('g2', 10, 1, 100)];
    const recentFailures = score([...good, src('f1', 10, 0, 100), src('f2', 10, 0, 100)]).trust_score;
    const oldFailures = score([...good.map((g) => ({ ...g })), src('f1', 10, 0, 100, old), src('f2', 10, 0, 100, old)]).trust_score;
    expect(oldFailures).toBeGreaterThan(recentFailures);
    expect(decayFactor(HALF_LIFE_HOURS * HOUR_MS)).toBeCloseTo(0.5, 10);
    expect(decayFactor(-1000)).toBe(1);
  });

  it('latency is judged against the category baseline', () => {
    const ev = [src('a', 15, 1, 400), src('b', 15, 1, 400)];
    const atPar = score(ev, 400);
    const slower = score(ev, 100);
    expect(atPar.trust_score).toBeGreaterThan(slower.trust_score);
    expect(slower.breakdown.latency_quality).toBeCloseTo(0.5); // two doublings above the mean
  });

  it('active anomalies cost points, and the breakdown is additive', () => {
    const ev = [src('a', 15, 0.95, 100), src('b', 15, 0.95, 100)];
    const calm = score(ev);
    const hit = score(ev, 200, ['error_rate_spike', 'latency_spike']);
    expect(calm.trust_score - hit.trust_score).toBeCloseTo(23, 0);
    const b = hit.breakdown;
    expect((b.prior_points as number) + (b.success_points as number) + (b.latency_points as number) - (b.anomaly_penalty as number)).toBeCloseTo(hit.trust_score, 0);
  });

  it('a coin-flip server fails however much evidence it has; 80% success is not a pass', () => {
    const many = (p: number) => score(Array.from({ length: 10 }, (_, i) => src(`s${i}`, 30, p, 100))).trust_score;
    expect(verdictFor(many(0.5))).toBe('FAIL');
    expect(verdictFor(many(0.8))).toBe('UNCERTAIN');
    expect(verdictFor(many(0.95))).toBe('PASS');
    expect(reliabilityCurve(0.5)).toBe(0);
    expect(reliabilityCurve(1)).toBe(1);
  });

  it('is deterministic: same evidence and clock, same score, whatever the order of sources', () => {
    const ev = [src('a', 7, 0.7, 300), src('b', 40, 0.9, 150), src('c', 3, 0.1, 900)];
    expect(score(ev)).toEqual(score([...ev].reverse()));
  });

  it('bounds a single source: a flood saturates at the source cap', () => {
    const flood = combineSources([src('x', 2000, 1, 100), src('y', 4, 0, 100), src('z', 4, 0, 100)], NOW);
    expect(flood.weight).toBeCloseTo(SOURCE_CAP + 8);
    expect(flood.sources).toBe(3);
    expect(flood.capped_weight).toBeCloseTo(2000 - SOURCE_CAP);
  });
});

describe('latency histogram', () => {
  it('bins and estimates the p95', () => {
    const h = emptyHistogram();
    for (let i = 0; i < 95; i++) h[latencyBin(40)]!++;
    for (let i = 0; i < 5; i++) h[latencyBin(2500)]!++;
    expect(histogramQuantile(h, 0.95)).toBeLessThanOrEqual(50);
    expect(histogramQuantile(h, 0.99)).toBeGreaterThanOrEqual(2000);
    expect(histogramQuantile(emptyHistogram(), 0.95)).toBeNull();
  });
});

describe('category baseline', () => {
  it('averages servers equally and counts every tracked server', () => {
    const h = emptyHistogram();
    h[latencyBin(100)] = 10;
    const b = categoryBaseline('search', [
      { n: 10, successes: 10, latency_sum: 1000, hist: h },
      { n: 1000, successes: 500, latency_sum: 300_000, hist: h },
      { n: 0, successes: 0, latency_sum: 0, hist: emptyHistogram() },
    ], 3);
    expect(b).toMatchObject({ category: 'search', avg_latency_ms: 200, avg_success_rate: 0.75, server_count: 3 });
    expect(b.p95_latency_ms).toBeGreaterThan(0);
  });
});

// A week of steady traffic: 20 reports an hour, 2% failures, ~100 ms, no 5xx.
function history(hours = 48, perHour = 20): HourRollup[] {
  const current = Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS;
  const out: HourRollup[] = [];
  for (let i = hours + 2; i >= 3; i--) {
    const wobble = (i % 5) * 4;
    out.push({ bucket: new Date(current - i * HOUR_MS), n: perHour, successes: perHour - (i % 3 === 0 ? 1 : 0), latency_sum: perHour * (95 + wobble), n_5xx: 0 });
  }
  return out;
}
function recent(n: number, successes: number, latency: number, n5xx = 0): HourRollup[] {
  const current = Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS;
  return [0, 1, 2].map((i) => ({ bucket: new Date(current - i * HOUR_MS), n, successes, latency_sum: n * latency, n_5xx: n5xx }));
}

describe('anomaly flags, each raised and not raised', () => {
  it('steady traffic raises nothing', () => {
    expect(detectAnomalies([...history(), ...recent(20, 20, 100)], NOW).flags).toEqual([]);
  });
  it('latency_spike: raised by a sustained jump, not by normal wobble', () => {
    expect(detectAnomalies([...history(), ...recent(20, 20, 400)], NOW).flags).toContain('latency_spike');
    expect(detectAnomalies([...history(), ...recent(20, 20, 120)], NOW).flags).not.toContain('latency_spike');
  });
  it('error_rate_spike: raised by many failures, not by one', () => {
    expect(detectAnomalies([...history(), ...recent(20, 10, 100)], NOW).flags).toContain('error_rate_spike');
    expect(detectAnomalies([...history(), ...recent(20, 19, 100)], NOW).flags).not.toContain('error_rate_spike');
  });
  it('burst_5xx: raised by a burst of 5xx, not by a couple', () => {
    expect(detectAnomalies([...history(), ...recent(20, 12, 100, 8)], NOW).flags).toContain('burst_5xx');
    expect(detectAnomalies([...history(), ...recent(20, 19, 100, 1)], NOW).flags).not.toContain('burst_5xx');
  });
  it('volume_drop: raised when traffic nearly stops, not when it dips', () => {
    expect(detectAnomalies([...history(), ...recent(1, 1, 100)], NOW).flags).toContain('volume_drop');
    expect(detectAnomalies([...history(), ...recent(14, 14, 100)], NOW).flags).not.toContain('volume_drop');
  });
  it('a young server (too little history) raises nothing, however odd its last hours', () => {
    expect(detectAnomalies([...history(6), ...recent(20, 0, 5000, 20)], NOW).flags).toEqual([]);
  });
  it('poisson tail', () => {
    expect(poissonCdf(0, 60)).toBeLessThan(1e-20);
    expect(poissonCdf(60, 60)).toBeGreaterThan(0.5);
  });
});

describe('deltas and trends', () => {
  const start = new Date(NOW.getTime() - 24 * HOUR_MS);
  const old = new Date(NOW.getTime() - 30 * 24 * HOUR_MS);
  const base = { url: 'u', name: 'n', category: 'general', registered_at: old };
  it('groups new, improved (> +5), degraded (< -5) and at-risk (< 40)', () => {
    const g = groupDeltas(
      [
        { ...base, url: 'new', registered_at: NOW, trust_score: 70, prev_score: null },
        { ...base, url: 'up', trust_score: 70, prev_score: 64.9 },
        { ...base, url: 'flat', trust_score: 70, prev_score: 65 },
        { ...base, url: 'down', trust_score: 30, prev_score: 35.1 },
        { ...base, url: 'flatdown', trust_score: 60, prev_score: 65 },
      ],
      start,
    );
    expect(g.servers_new.map((s) => s.url)).toEqual(['new']);
    expect(g.servers_improved.map((s) => s.url)).toEqual(['up']);
    expect(g.servers_degraded.map((s) => [s.url, s.delta])).toEqual([['down', -5.1]]);
    expect(g.servers_at_risk.map((s) => s.url)).toEqual(['down']);
  });
  it('windows and trends', () => {
    expect(['24h', '48h', '7d'].every(isDeltaWindow)).toBe(true);
    expect(isDeltaWindow('1h')).toBe(false);
    expect(isDeltaWindow('toString')).toBe(false);
    expect(reliabilityTrend({ n: 100, successes: 95 }, { n: 100, successes: 80 })).toBe('improving');
    expect(reliabilityTrend({ n: 100, successes: 80 }, { n: 100, successes: 95 })).toBe('declining');
    expect(reliabilityTrend({ n: 100, successes: 90 }, { n: 100, successes: 88 })).toBe('stable');
    expect(reliabilityTrend({ n: 10, successes: 10 }, { n: 100, successes: 88 })).toBe('insufficient_data');
  });
});
