// Issue 17 finding 6, pure parts: the one function for "the network of a client address", source
// families in the scoring model, and the one-source bound that docs/integrity.md states,
// computed from the model rather than copied.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clientNetwork } from '../src/domain/client-network.js';
import {
  combineSources,
  computeTrustScore,
  keySource,
  KEYED_SOURCE_CAP,
  OBSERVATORY_SOURCE,
  OBSERVATORY_SOURCE_CAP,
  PRIOR_WEIGHT,
  SOURCE_CAP,
  sourceFamily,
  type SourceAccumulator,
} from '../src/domain/scoring.js';
import { detectAnomaliesRobust, HOUR_MS, type SourceHourRollup } from '../src/domain/anomaly.js';
import { gradeFor, verdictFor } from '../src/domain/verdict.js';

const NOW = new Date('2026-03-01T12:30:00Z');
const acc = (source: string, n: number, p: number, latency = 50): SourceAccumulator => ({ source, weight: n, successes: n * p, latency_sum: n * latency, reports: n, updated_at: NOW });
const score = (sources: SourceAccumulator[]) => computeTrustScore({ sources, baselineLatencyMs: 50, anomalyFlags: [], now: NOW });

describe('clientNetwork: IPv4 /32, IPv6 /64, IPv4-mapped IPv6 as IPv4', () => {
  it.each([
    ['203.0.113.7', '203.0.113.7'],
    [' 203.0.113.7 ', '203.0.113.7'],
    ['::ffff:203.0.113.7', '203.0.113.7'],
    ['::FFFF:203.0.113.7', '203.0.113.7'],
    ['0:0:0:0:0:ffff:203.0.113.7', '203.0.113.7'],
    ['::ffff:cb00:7107', '203.0.113.7'],
    ['0000:0000:0000:0000:0000:ffff:cb00:7107', '203.0.113.7'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:ffff:1:2:3', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:db8::', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    // An embedded IPv4 tail is two groups: the /64 must not shift.
    ['a::b:c:d:e:1.2.3.4', 'a:0:b:c::/64'],
    ['64:ff9b::192.0.2.1', '64:ff9b:0:0::/64'],
    ['[2001:db8:1:2::1]', '2001:db8:1:2::/64'],
  ])('%s -> %s', (address, network) => {
    // Twice: the second answer is the remembered one.
    expect(clientNetwork(address)).toBe(network);
    expect(clientNetwork(address)).toBe(network);
  });

  it('stays right for addresses past its memory (the oldest are forgotten, then computed again)', () => {
    for (let i = 0; i < 10_000; i++) expect(clientNetwork(`10.${i >> 8}.${i & 255}.1`)).toBe(`10.${i >> 8}.${i & 255}.1`);
    expect(clientNetwork('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(clientNetwork('10.0.0.1')).toBe('10.0.0.1');
  });

  it('anything that is not an IP address is kept as it is (lower-case), never throws', () => {
    expect(clientNetwork('unknown')).toBe('unknown');
    expect(clientNetwork('')).toBe('');
    expect(clientNetwork('1:2:3:4:5:6:7:8:9')).toBe('1:2:3:4:5:6:7:8:9');
  });
});

describe('source families: keys registered from one network weigh as one source', () => {
  it('families of each kind of source', () => {
    expect(sourceFamily('addr:abc')).toBe('net:abc');
    expect(sourceFamily(keySource('f'.repeat(64), 'abc'))).toBe('net:abc');
    expect(sourceFamily(keySource('f'.repeat(64), null))).toBe(`key:${'f'.repeat(32)}`);
    expect(sourceFamily(OBSERVATORY_SOURCE)).toBe(OBSERVATORY_SOURCE);
    expect(sourceFamily('local')).toBe('local');
  });

  it('twelve keys of one family saturate like one key; the address of that network joins the family', () => {
    const keys = Array.from({ length: 12 }, (_, i) => acc(keySource(i.toString(16).padStart(64, '0'), 'fam1'), 60, 1));
    const one = combineSources(keys, NOW);
    expect(one.sources).toBe(1);
    expect(one.keyed_sources).toBe(1);
    expect(one.weight).toBeCloseTo(KEYED_SOURCE_CAP, 9);
    const withAddress = combineSources([...keys, acc('addr:fam1', 30, 1)], NOW);
    expect(withAddress.sources).toBe(1);
    expect(withAddress.weight).toBeCloseTo(KEYED_SOURCE_CAP, 9);
    // Keys of two networks are two sources.
    const two = combineSources([...keys, acc(keySource('e'.repeat(64), 'fam2'), 60, 1)], NOW);
    expect(two.sources).toBe(2);
    expect(two.weight).toBeCloseTo(2 * KEYED_SOURCE_CAP, 9);
  });

  it('a family flooding successes cannot lift a server five sources report as failing', () => {
    const honest = Array.from({ length: 5 }, (_, i) => acc(`addr:h${i}`, 4, 0));
    const family = Array.from({ length: 12 }, (_, i) => acc(keySource(i.toString(16).padStart(64, '0'), 'fam1'), 60, 1));
    const s = score([...honest, ...family]);
    expect(verdictFor(s.trust_score)).toBe('FAIL');
    expect(s.breakdown.independent_sources).toBe(6);
  });

  it('anomaly flags need corroboration beyond the most active family, not just the most active key', () => {
    const hour = (h: number) => new Date(Math.floor(NOW.getTime() / HOUR_MS) * HOUR_MS - h * HOUR_MS);
    const row = (source: string, h: number, n: number, successes: number): SourceHourRollup => ({ source, bucket: hour(h), n, successes, latency_sum: n * 50, n_5xx: n - successes });
    const rows: SourceHourRollup[] = [];
    // History: five honest sources, all successes, for two days.
    for (let h = 3; h < 48; h++) for (let s = 0; s < 5; s++) rows.push(row(`addr:h${s}`, h, 2, 2));
    // Recent hours: three keys of one family report nothing but failures.
    for (let h = 0; h < 3; h++) for (let k = 0; k < 3; k++) rows.push(row(keySource(k.toString(16).padStart(64, '0'), 'fam1'), h, 40, 0));
    for (let h = 0; h < 3; h++) for (let s = 0; s < 5; s++) rows.push(row(`addr:h${s}`, h, 2, 2));
    expect(detectAnomaliesRobust(rows, NOW).flags).toEqual([]);
  });
});

describe('the one-source bound of docs/integrity.md agrees with the model', () => {
  const doc = readFileSync(join(import.meta.dirname, '..', 'docs', 'integrity.md'), 'utf8');
  // One saturated source reporting only fast successes, or only slow failures.
  const best = (source: string) => score([acc(source, 5000, 1, 10)]).trust_score;
  const worst = (source: string) => score([acc(source, 5000, 0, 60_000)]).trust_score;

  it('computes the bound from the constants and the score function', () => {
    const c = SOURCE_CAP / (SOURCE_CAP + PRIOR_WEIGHT);
    const ck = KEYED_SOURCE_CAP / (KEYED_SOURCE_CAP + PRIOR_WEIGHT);
    expect(best('addr:a')).toBeCloseTo(50 + 50 * c, 1);
    expect(best(keySource('a'.repeat(64), 'n1'))).toBeCloseTo(50 + 50 * ck, 1);
    expect(worst('addr:a')).toBeCloseTo(50 - 50 * c, 1);
    // Probes alone: half an address source.
    const co = OBSERVATORY_SOURCE_CAP / (OBSERVATORY_SOURCE_CAP + PRIOR_WEIGHT);
    expect(best(OBSERVATORY_SOURCE)).toBeCloseTo(50 + 50 * co, 1);
  });

  it('the doc states the computed bound and the grade it gives, for an address, a key family and the probes', () => {
    const fmt = (x: number) => x.toFixed(1);
    const address = best('addr:a');
    const keyed = best(keySource('a'.repeat(64), 'n1'));
    const probes = best(OBSERVATORY_SOURCE);
    // The sentence that states the bound (docs/integrity.md "The bound"); line breaks are spaces.
    const text = doc.replace(/\s+/g, ' ');
    const stated = /One source alone\*\* keeps a server within [^:]*: between \*\*([\d.]+) and ([\d.]+)\*\* \(keyed ([\d.]+) to ([\d.]+)\)/.exec(text);
    expect(stated, 'docs/integrity.md states the one-source bound').not.toBeNull();
    expect(stated![2]).toBe(fmt(address));
    expect(stated![4]).toBe(fmt(keyed));
    expect(stated![1]).toBe(fmt(100 - address));
    expect(stated![3]).toBe(fmt(100 - keyed));
    // The grade the doc names for one source (and for a family of keys) is the grade of the bound.
    const gradeClaim = /a single reporter [^.]*? at most grade \*\*([A-F])\*\* on its own \(([\d.]+); ([\d.]+) through keys\), never grade ([A-F])/.exec(text);
    expect(gradeClaim, 'docs/integrity.md names the best grade one source can give').not.toBeNull();
    expect(gradeClaim![1]).toBe(gradeFor(Math.max(address, keyed)));
    expect([gradeClaim![2], gradeClaim![3]]).toEqual([fmt(address), fmt(keyed)]);
    expect(gradeClaim![4]).toBe('A');
    expect(gradeFor(keyed)).not.toBe('A');
    const probeClaim = /Alone it keeps a server within ([\d.]+) to ([\d.]+)[^.]*?grade ([A-F]) at best/.exec(text);
    expect(probeClaim).not.toBeNull();
    expect(probeClaim![2]).toBe(fmt(probes));
    expect(probeClaim![3]).toBe(gradeFor(probes));
    // Nowhere does the doc promise a grade the model does not keep.
    expect(doc).not.toMatch(/grade C, never A or B/);
    expect(doc).not.toMatch(/never make a server grade A or B on its own/);
  });
});
