// Evidence integrity in the pure model (docs/integrity.md): per-source saturation, the robust
// combination, source-robust anomaly flags and baselines. Fixed clock throughout.
import { describe, expect, it } from 'vitest';
import { detectAnomalies, detectAnomaliesRobust, HOUR_MS, sumBySource, type SourceHourRollup } from '../src/domain/anomaly.js';
import { familyVotes, robustCategoryBaseline, robustServerFigures } from '../src/domain/baseline.js';
import { emptyHistogram, latencyBin } from '../src/domain/latency-histogram.js';
import {
  CLIP_SLACK,
  combineSources,
  computeTrustScore,
  HUBER_K,
  KEYED_SOURCE_CAP,
  PRIOR_WEIGHT,
  robustSuccessRate,
  SOURCE_CAP,
  weightedMedian,
  type SourceAccumulator,
} from '../src/domain/scoring.js';
import { verdictFor } from '../src/domain/verdict.js';
import { clientNetwork as sourceAddressPrefix } from '../src/domain/client-network.js';

const NOW = new Date('2026-03-01T12:30:00Z');
const src = (source: string, n: number, p: number, latency = 50, at = NOW): SourceAccumulator => ({
  source,
  weight: n,
  successes: n * p,
  latency_sum: n * latency,
  reports: n,
  updated_at: at,
});
const group = (k: number, n: number, p: number, prefix: string, latency = 50) => Array.from({ length: k }, (_, i) => src(`addr:${prefix}${i}`, n, p, latency));
const score = (sources: SourceAccumulator[], baseline = 50) => computeTrustScore({ sources, baselineLatencyMs: baseline, anomalyFlags: [], now: NOW });

describe('robust statistics', () => {
  it('weighted median: half the weight decides, exact ties average', () => {
    expect(weightedMedian([{ value: 0, weight: 3 }, { value: 1, weight: 2 }])).toBe(0);
    expect(weightedMedian([{ value: 0, weight: 2 }, { value: 1, weight: 2 }])).toBe(0.5);
    expect(weightedMedian([])).toBe(0);
  });

  it('honest sources that agree within sampling noise are averaged as they are', () => {
    const xs = [0.9, 0.95, 1, 0.92, 0.97].map((rate) => ({ rate, weight: 12 }));
    expect(robustSuccessRate(xs)).toBeCloseTo(xs.reduce((s, x) => s + x.rate, 0) / xs.length, 6);
  });

  it('many one-report sources estimate a mediocre server without the bias of a plain median', () => {
    const oneShots = Array.from({ length: 100 }, (_, i) => ({ rate: i < 20 ? 0 : 1, weight: 1 }));
    expect(weightedMedian(oneShots.map((x) => ({ value: x.rate, weight: x.weight })))).toBe(1);
    expect(robustSuccessRate(oneShots)).toBeCloseTo(0.8, 2);
  });

  it("an outlying source moves the estimate at most its weight x band / the others' weight", () => {
    const honest = Array.from({ length: 10 }, () => ({ rate: 1, weight: 5 }));
    const p = robustSuccessRate([...honest, { rate: 0, weight: SOURCE_CAP }]);
    const band = HUBER_K * Math.sqrt(0.25 / SOURCE_CAP) + CLIP_SLACK;
    expect(1 - p).toBeLessThanOrEqual((SOURCE_CAP * band) / 50 + 1e-9);
    expect(1 - p).toBeGreaterThan(0);
  });
});

describe('per-source saturation and confidence', () => {
  it('a source saturates at its cap; a registered key at the keyed cap', () => {
    expect(combineSources([src('addr:a', 2000, 1)], NOW).weight).toBe(SOURCE_CAP);
    expect(combineSources([src('key:a', 2000, 1)], NOW).weight).toBe(KEYED_SOURCE_CAP);
    const b = score([src('key:a', 2000, 1), src('addr:b', 3, 1)]).breakdown;
    expect(b).toMatchObject({ independent_sources: 2, keyed_sources: 1, source_cap: SOURCE_CAP, keyed_source_cap: KEYED_SOURCE_CAP });
    expect(b.max_source_share).toBeCloseTo(KEYED_SOURCE_CAP / (KEYED_SOURCE_CAP + 3), 3);
  });

  it('confidence grows with independent sources, not with the volume of one', () => {
    const one = score([src('addr:a', 5000, 1)]).breakdown.confidence as number;
    expect(one).toBeCloseTo(SOURCE_CAP / (SOURCE_CAP + PRIOR_WEIGHT), 3);
    const ten = score(group(10, 500, 1, 's')).breakdown.confidence as number;
    expect(ten).toBeCloseTo((10 * SOURCE_CAP) / (10 * SOURCE_CAP + PRIOR_WEIGHT), 3);
  });

  it('the cap decays from a source\'s last report: a flood a week old counts half a source', () => {
    const weekAgo = new Date(NOW.getTime() - 168 * HOUR_MS);
    expect(combineSources([src('addr:old', 100_000, 1, 50, weekAgo)], NOW).weight).toBeCloseTo(SOURCE_CAP / 2, 6);
  });

  it('one address flooding every day (a new source per day) is worth about 5.3 sources after a week, at most ~10.6', () => {
    const daily = (days: number) =>
      combineSources(Array.from({ length: days }, (_, d) => src(`addr:day${d}`, 2000, 1, 50, new Date(NOW.getTime() - d * 24 * HOUR_MS))), NOW).weight / SOURCE_CAP;
    expect(daily(7)).toBeCloseTo(5.3, 1);
    expect(daily(365)).toBeLessThan(10.7);
    expect(daily(365)).toBeGreaterThan(10.5);
  });

  it('one source alone keeps the score within [50 - 50c1, 50 + 50c1]', () => {
    const c1 = SOURCE_CAP / (SOURCE_CAP + PRIOR_WEIGHT);
    const up = score([src('addr:a', 100_000, 1)]).trust_score;
    const down = score([src('addr:a', 100_000, 0, 60_000)]).trust_score;
    expect(up).toBeLessThanOrEqual(50 + 50 * c1 + 0.05);
    expect(down).toBeGreaterThanOrEqual(50 - 50 * c1 - 0.05);
    expect(verdictFor(up)).toBe('PASS');
    expect(verdictFor(down)).toBe('FAIL');
  });
});

describe('the four properties of issue 12, in the model', () => {
  it('a single honest source: 120 fast successes PASS, 120 failures FAIL', () => {
    expect(verdictFor(score([src('addr:a', 120, 1)]).trust_score)).toBe('PASS');
    expect(verdictFor(score([src('addr:a', 120, 0)]).trust_score)).toBe('FAIL');
  });

  it('5 sources x 4 failures plus one source flooding 2,000 successes: not PASS (address or key)', () => {
    for (const flooder of ['addr:flood', 'key:flood']) {
      expect(verdictFor(score([...group(5, 4, 0, 'f'), src(flooder, 2000, 1)]).trust_score)).not.toBe('PASS');
    }
  });

  it('10 sources x 5 successes plus one source flooding 2,000 failures: stays PASS (address or key)', () => {
    for (const flooder of ['addr:flood', 'key:flood']) {
      expect(verdictFor(score([...group(10, 5, 1, 'g'), src(flooder, 2000, 0, 5000)]).trust_score)).toBe('PASS');
    }
  });

  it('30 sources x 10 failures take a PASS server below PASS', () => {
    const good = group(10, 5, 1, 'g');
    expect(verdictFor(score(good).trust_score)).toBe('PASS');
    expect(verdictFor(score([...good, ...group(30, 10, 0, 'x')]).trust_score)).not.toBe('PASS');
  });

  it('order of sources does not matter', () => {
    const ev = [...group(3, 4, 0.5, 'a'), src('key:k', 90, 0.9, 300), src('addr:z', 1, 0, 10)];
    expect(score(ev)).toEqual(score([...ev].reverse()));
  });
});

// A week of steady traffic from four honest sources (5 an hour each, ~2% failures, ~100 ms).
function honestHistory(hours = 48): SourceHourRollup[] {
  const current = Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS;
  const out: SourceHourRollup[] = [];
  for (let h = 3; h < 3 + hours; h++) {
    for (let s = 0; s < 4; s++) {
      out.push({ source: `addr:h${s}`, bucket: new Date(current - h * HOUR_MS), n: 5, successes: h % 10 === s ? 4 : 5, latency_sum: 5 * (95 + ((h + s) % 10)), n_5xx: 0 });
    }
  }
  return out;
}
function recentHours(source: string, n: number, successes: number, latency: number, n5xx = 0): SourceHourRollup[] {
  const current = Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS;
  return [0, 1, 2].map((h) => ({ source, bucket: new Date(current - h * HOUR_MS), n, successes, latency_sum: n * latency, n_5xx: n5xx }));
}

describe('source-robust anomaly flags', () => {
  const honestRecent = [0, 1, 2, 3].flatMap((s) => recentHours(`addr:h${s}`, 5, 5, 100));

  it('one source flooding failures cannot fake an error spike, a 5xx burst or a latency spike', () => {
    const flood = recentHours('addr:attacker', 700, 0, 9000, 700);
    const rows = [...honestHistory(), ...honestRecent, ...flood];
    // The plain test would fire on the summed evidence...
    expect(detectAnomalies(sumBySource(rows), NOW).flags).toEqual(expect.arrayContaining(['error_rate_spike', 'burst_5xx', 'latency_spike']));
    // ...the source-robust one does not.
    const r = detectAnomaliesRobust(rows, NOW);
    expect(r.flags).toEqual([]);
    expect(r.details.uncorroborated_flags).toContain('error_rate_spike');
  });

  it('flooding the history and stopping cannot fake a volume drop', () => {
    const current = Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS;
    const floodHistory: SourceHourRollup[] = Array.from({ length: 48 }, (_, i) => ({
      source: 'addr:attacker', bucket: new Date(current - (3 + i) * HOUR_MS), n: 400, successes: 400, latency_sum: 40_000, n_5xx: 0,
    }));
    const rows = [...honestHistory(), ...floodHistory, ...honestRecent];
    expect(detectAnomalies(sumBySource(rows), NOW).flags).toContain('volume_drop');
    expect(detectAnomaliesRobust(rows, NOW).flags).toEqual([]);
  });

  it('a real incident seen by many sources is still flagged', () => {
    const incident = [0, 1, 2, 3].flatMap((s) => recentHours(`addr:h${s}`, 5, 1, 100, 4));
    const r = detectAnomaliesRobust([...honestHistory(), ...incident], NOW);
    expect(r.flags).toEqual(expect.arrayContaining(['error_rate_spike', 'burst_5xx']));
    expect(r.details.sources).toBe(4);
  });
});

describe('source-robust category baseline', () => {
  const hist = (latency: number, n: number) => {
    const h = emptyHistogram();
    h[latencyBin(latency)] = n;
    return h;
  };
  const honest = (latency: number) => robustServerFigures([src('addr:a', 10, 1, latency), src('addr:b', 10, 1, latency)], hist(latency, 20), NOW);

  it('a server one source floods does not move the bar for the others', () => {
    const fair = robustCategoryBaseline('search', [honest(100), honest(200)], 2);
    const fake = robustServerFigures([src('addr:attacker', 5000, 0, 60_000)], hist(60_000, 5000), NOW);
    const attacked = robustCategoryBaseline('search', [honest(100), honest(200), fake], 3);
    expect(attacked).toEqual({ ...fair, server_count: 3 });
    expect(fair.avg_latency_ms).toBe(150);
    expect(fair.avg_success_rate).toBe(1);
  });

  it('within a server the flooding source is outvoted too', () => {
    const flooded = robustServerFigures([src('addr:a', 10, 1, 100), src('addr:b', 10, 1, 100), src('addr:c', 10, 1, 100), src('addr:x', 5000, 0, 60_000)], hist(100, 30), NOW);
    expect(flooded.mean_latency).toBe(100);
    expect(flooded.success_rate).toBeGreaterThan(0.9);
  });

  it('a few sources cannot move the bar by creating many servers: each source family has one vote', () => {
    // An honest weather server: five addresses see it at 300 ms. Two colluding addresses create
    // forty decoy servers and corroborate each other on all of them at 1 ms. As forty servers of
    // the category's 41, they made the bar 8 ms, and the honest server "slow" against it.
    const five = ['h1', 'h2', 'h3', 'h4', 'h5'];
    const real = robustServerFigures(five.map((a) => src(`addr:${a}`, 10, 1, 300)), hist(300, 50), NOW);
    const decoy = () => robustServerFigures([src('addr:x', 10, 1, 1), src('addr:y', 10, 1, 1)], hist(1, 20), NOW);
    const decoys = Array.from({ length: 40 }, decoy);
    const attacked = robustCategoryBaseline('weather', [real, ...decoys], 41);
    // Five votes at 300 ms, two at 1 ms.
    expect(attacked.avg_latency_ms).toBe(Math.round(((5 * 300 + 2 * 1) / 7) * 10) / 10);
    expect(familyVotes([real, ...decoys]).reduce((a, b) => a + b, 0)).toBeCloseTo(7, 9);
    // However many decoys: the two addresses never weigh more than two votes.
    const more = robustCategoryBaseline('weather', [real, ...decoys, ...decoys, ...decoys], 121);
    expect(more.avg_latency_ms).toBe(attacked.avg_latency_ms);
    // Honest servers with sources of their own are unaffected: equal votes, plain means.
    const other = robustServerFigures(['o1', 'o2', 'o3', 'o4', 'o5'].map((a) => src(`addr:${a}`, 10, 1, 100)), hist(100, 50), NOW);
    expect(robustCategoryBaseline('weather', [real, other], 2).avg_latency_ms).toBe(200);
  });

  it('a category of one-source servers still has a baseline', () => {
    const solo = robustServerFigures([src('addr:a', 10, 1, 80)], hist(80, 10), NOW);
    expect(robustCategoryBaseline('weather', [solo], 1)).toMatchObject({ avg_latency_ms: 80, avg_success_rate: 1, server_count: 1 });
  });
});

describe('source address prefix', () => {
  it('keeps IPv4, unmaps IPv4-mapped IPv6 and groups IPv6 by /64', () => {
    expect(sourceAddressPrefix('203.0.113.7')).toBe('203.0.113.7');
    expect(sourceAddressPrefix('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(sourceAddressPrefix('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(sourceAddressPrefix('2001:0db8:0001:0002:ffff:1:2:3')).toBe('2001:db8:1:2::/64');
    expect(sourceAddressPrefix('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(sourceAddressPrefix('::1')).toBe('0:0:0:0::/64');
    expect(sourceAddressPrefix('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
  });
});
