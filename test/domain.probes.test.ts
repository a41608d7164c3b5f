import { describe, expect, it } from 'vitest';
import { dimensionResult, exportPeriod, overallResult, BadDateRange, type Control } from '../src/domain/compliance.js';
import { diffManifests, driftFlagActive, DRIFT_FLAG_WINDOW_MS, hashManifest, manifestToolOf } from '../src/domain/drift.js';
import { robotsBlocksAll, rubric, scoreReadiness } from '../src/domain/readiness.js';

const NOW = new Date('2026-03-15T12:00:00Z');

describe('drift domain', () => {
  it('hashes JCS-canonically and names what changed', () => {
    const a = hashManifest([{ name: 't', description: 'd', inputSchema: { b: 1, a: 2 } }]);
    const b = hashManifest([{ name: 't', inputSchema: { a: 2, b: 1 }, description: 'd' }]);
    expect(a.manifest_hash).toBe(b.manifest_hash);
    const c = hashManifest([{ name: 't', description: 'd', inputSchema: { a: 2, b: 1 }, outputSchema: { type: 'object' }, annotations: { readOnlyHint: true } }]);
    expect(diffManifests(a.tools, c.tools)).toEqual({ added: [], removed: [], changed: [{ name: 't', changes: ['output_schema', 'annotations'] }] });
  });
  it('hashes tools in canonical order: the order a server lists them in is no drift', () => {
    const x = { name: 'x', description: 'X', inputSchema: { type: 'object' } };
    const y = { name: 'y', description: 'Y' };
    const z = { name: 'z', annotations: { readOnlyHint: true } };
    const base = hashManifest([x, y, z]);
    for (const order of [[z, y, x], [y, x, z], [x, z, y]]) expect(hashManifest(order).manifest_hash).toBe(base.manifest_hash);
    expect(base.tools.map((t) => t.name)).toEqual(['x', 'y', 'z']);
    // A name listed twice (an old server's bug) still hashes the same whatever the order.
    const twice = [x, { ...x, description: 'other' }];
    expect(hashManifest(twice).manifest_hash).toBe(hashManifest([...twice].reverse()).manifest_hash);
  });

  it('per-response and presentational metadata never count as drift (ttlMs, cacheScope, _meta, title, icons, execution)', () => {
    const tool = { name: 't', description: 'd', inputSchema: { type: 'object', properties: { a: { type: 'string' } } }, outputSchema: { type: 'object' }, annotations: { readOnlyHint: true } };
    const base = hashManifest([tool]);
    // What a 2026-07-28 tools/list answer adds around and on each tool, different every time.
    const listed = [
      { ...tool, _meta: { 'example.com/served': 1 }, title: 'T', icons: [{ src: 'https://example.com/a.png' }], execution: { taskSupport: 'optional' } },
      { ...tool, _meta: { 'example.com/served': 2, ttlMs: 60_000, cacheScope: 'public' } },
    ];
    for (const l of listed) {
      expect(manifestToolOf(l)).toEqual(tool);
      const h = hashManifest([l as typeof tool]);
      expect(h.manifest_hash).toBe(base.manifest_hash);
      expect(diffManifests(base.tools, h.tools)).toEqual({ added: [], removed: [], changed: [] });
    }
    // What an agent relies on does count.
    const changed = hashManifest([{ ...tool, annotations: { readOnlyHint: false } }]);
    expect(diffManifests(base.tools, changed.tools).changed).toEqual([{ name: 't', changes: ['annotations'] }]);
  });

  it('keeps the flag raised for the window only', () => {
    expect(driftFlagActive(null, NOW)).toBe(false);
    expect(driftFlagActive(new Date(NOW.getTime() - DRIFT_FLAG_WINDOW_MS), NOW)).toBe(true);
    expect(driftFlagActive(new Date(NOW.getTime() - DRIFT_FLAG_WINDOW_MS - 1), NOW)).toBe(false);
  });
});

describe('readiness rubric', () => {
  it('gives every dimension exactly 100 points', () => {
    const sums: Record<string, number> = {};
    for (const r of rubric()) sums[r.dimension] = (sums[r.dimension] ?? 0) + r.points;
    expect(sums).toEqual({ discoverability: 100, comprehension: 100, usability: 100, trustability: 100, transactability: 100 });
  });
  it('scores nothing for nothing and explains every withheld point', () => {
    const s = scoreReadiness({ https: false, robots: null, llms: null, openapi: null, mcp: null, agent: null });
    expect(s.score).toBe(0);
    expect(Object.values(s.reasons).flat().every((r) => r.points === 0 && r.reason.length > 0)).toBe(true);
  });
  it('reads robots.txt groups', () => {
    expect(robotsBlocksAll('User-agent: *\nDisallow: /')).toBe(true);
    expect(robotsBlocksAll('User-agent: badbot\nDisallow: /\n\nUser-agent: *\nAllow: /')).toBe(false);
    expect(robotsBlocksAll('User-agent: *\nDisallow: /private')).toBe(false);
  });
});

describe('compliance domain', () => {
  const c = (status: Control['status']): Control => ({ id: 'x', title: 'x', category: 'auth', status, evidence: {}, detail: '' });
  it('decides dimensions and the overall result', () => {
    expect(dimensionResult([c('pass'), c('self_attestation_required')])).toBe('PASS');
    expect(dimensionResult([c('fail'), c('fail')])).toBe('FAIL');
    expect(dimensionResult([c('pass'), c('fail')])).toBe('PARTIAL');
    expect(dimensionResult([c('self_attestation_required')])).toBe('PARTIAL');
    expect(overallResult(['PASS', 'PASS'])).toBe('PASS');
    expect(overallResult(['PASS', 'PARTIAL'])).toBe('PARTIAL');
    expect(overallResult(['PARTIAL', 'FAIL'])).toBe('FAIL');
  });
  it('parses export periods strictly', () => {
    expect(exportPeriod(undefined, undefined, NOW)).toMatchObject({ start_date: '2026-02-14', end_date: '2026-03-15' });
    const p = exportPeriod('2026-01-01', '2026-01-01', NOW);
    expect(p.to.getTime() - p.from.getTime()).toBe(86_400_000);
    expect(() => exportPeriod('2026-02-29', undefined, NOW)).toThrow(BadDateRange);
    expect(() => exportPeriod('2026-1-01', undefined, NOW)).toThrow(BadDateRange);
    expect(() => exportPeriod('2026-03-02', '2026-03-01', NOW)).toThrow(/after/);
    expect(() => exportPeriod('1900-01-01', '2026-01-01', NOW)).toThrow(/at most/);
  });
});
