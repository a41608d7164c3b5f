import { describe, expect, it } from 'vitest';
import { bundleDelta, bundleEntry, bundleExitCode, checkBundleClaims, filterKey, indexBundle, lookupBundleEntry, parseBundleFilters, type BundleSourceRow } from '../src/domain/bundle.js';
import { negotiateEncoding } from '../src/http/routes/bundle.js';
import { loadConfig } from '../src/config.js';
import { expectConfigRefusal } from './support/config.js';

// The pure rules of offline bundles: entries, filters, deltas, exit codes, look-ups, claims.

const NOW = new Date('2026-11-26T10:00:00Z');
const row = (o: Partial<BundleSourceRow> = {}): BundleSourceRow => ({
  url: 'https://a.example.com/mcp',
  name: 'a.example.com/mcp',
  slug: 'a-example-com-mcp',
  category: 'general',
  trust_score: 72.4,
  verdict: 'PASS',
  anomaly_flags: ['latency_spike'],
  computed_at: new Date('2026-11-26T09:59:00Z'),
  n: 40,
  last_at: new Date('2026-11-26T09:58:00Z'),
  manifest_hash: 'abc',
  last_drift_at: null,
  card_mismatch_at: null,
  interactions_30d: 40,
  ...o,
});

describe('bundle entries', () => {
  it('state what pre-flight says: UNRATED with no reports (no score, no runtime flags), flags from drift and cards while active', () => {
    expect(bundleEntry(row(), NOW, 7 * 86_400_000)).toMatchObject({ verdict: 'PASS', trust_score: 72.4, tier: 'Silver', anomaly_flags: ['latency_spike'], drift: { tool_manifest_drift: false, last_drift_at: null }, tool_manifest_hash: 'abc', evidence_at: '2026-11-26T09:58:00.000Z' });
    expect(bundleEntry(row({ n: 0 }), NOW, 1)).toMatchObject({ verdict: 'UNRATED', trust_score: null, tier: 'Unrated', anomaly_flags: [] });
    expect(bundleEntry(row({ verdict: null, trust_score: null }), NOW, 1)).toMatchObject({ verdict: 'UNRATED', trust_score: null });
    expect(bundleEntry(row({ interactions_30d: 10 }), NOW, 1).tier).toBe('Unrated');
    const drifted = bundleEntry(row({ last_drift_at: new Date('2026-11-25T10:00:00Z'), card_mismatch_at: new Date('2026-11-26T09:00:00Z') }), NOW, 7 * 86_400_000);
    expect(drifted.anomaly_flags).toEqual(['latency_spike', 'tool_manifest_drift', 'server_card_mismatch']);
    expect(drifted.drift).toEqual({ tool_manifest_drift: true, last_drift_at: '2026-11-25T10:00:00.000Z' });
    const old = bundleEntry(row({ last_drift_at: new Date('2026-10-01T00:00:00Z'), card_mismatch_at: new Date('2026-10-01T00:00:00Z') }), NOW, 7 * 86_400_000);
    expect(old.anomaly_flags).toEqual(['latency_spike']);
    expect(old.drift.tool_manifest_drift).toBe(false);
  });
});

describe('bundle filters', () => {
  it('reads category and verdict lists, refusing what it does not know', () => {
    expect(parseBundleFilters(undefined, undefined)).toEqual({ category: null, verdicts: null });
    expect(parseBundleFilters('Weather', 'fail, pass,FAIL')).toEqual({ category: 'weather', verdicts: ['PASS', 'FAIL'] });
    for (const [c, v] of [['nope', undefined], ['', undefined], [undefined, ''], [undefined, 'PASS,,FAIL'], [undefined, 'OK']] as const) {
      expect(parseBundleFilters(c, v), `${c} ${v}`).toHaveProperty('problem');
    }
    expect(filterKey({ category: null, verdicts: null })).toBe('category=*;verdict=*');
    expect(filterKey({ category: 'code', verdicts: ['FAIL'] })).toBe('category=code;verdict=FAIL');
  });
});

describe('bundle deltas', () => {
  it('lists added and changed entries and the URLs that left', () => {
    const base = new Map([
      ['https://a/', 'd1'],
      ['https://b/', 'd2'],
      ['https://gone/', 'd3'],
    ]);
    const cur = [
      { entry: { url: 'https://a/' }, digest: 'd1' },
      { entry: { url: 'https://b/' }, digest: 'changed' },
      { entry: { url: 'https://new/' }, digest: 'd4' },
    ];
    expect(bundleDelta(base, cur)).toEqual({ changed: [{ url: 'https://b/' }, { url: 'https://new/' }], removed: ['https://gone/'] });
    expect(bundleDelta(new Map(), [])).toEqual({ changed: [], removed: [] });
  });
});

describe('offline check', () => {
  it('exits as the online check: 0 PASS, 1 FAIL, 2 neither', () => {
    expect(bundleExitCode('PASS')).toBe(0);
    expect(bundleExitCode('FAIL')).toBe(1);
    expect(bundleExitCode('UNCERTAIN')).toBe(2);
    expect(bundleExitCode('UNRATED')).toBe(2);
  });

  it('finds a server by URL (query falls back), slug or name; nothing else', () => {
    const e = bundleEntry(row({ url: 'https://a.example.com/mcp', name: 'Weather One', slug: 'weather-one' }), NOW, 1);
    const idx = indexBundle([e]);
    expect(lookupBundleEntry(idx, 'HTTPS://A.example.com:443/mcp')).toBe(e);
    expect(lookupBundleEntry(idx, 'https://a.example.com/mcp?session=1')).toBe(e);
    expect(lookupBundleEntry(idx, 'weather-one')).toBe(e);
    expect(lookupBundleEntry(idx, 'Weather One')).toBe(e);
    expect(lookupBundleEntry(idx, 'https://b.example.com/mcp')).toBeNull();
    expect(lookupBundleEntry(idx, '   ')).toBeNull();
    expect(() => lookupBundleEntry(idx, 'https://')).toThrow();
  });

  it('accepts only unexpired bundle claims', () => {
    const p = { kind: 'bundle', schema: 'observatory-bundle-v1', iat: 100, exp: 200, bundle_id: '0123456789abcdef', servers: [], removed: [] };
    expect(checkBundleClaims(p, new Date(150_000))).toMatchObject({ ok: true });
    expect(checkBundleClaims(p, new Date(200_000))).toMatchObject({ ok: false, reason: expect.stringMatching(/^bundle expired at/) });
    expect(checkBundleClaims({ ...p, kind: 'preflight' }, new Date(150_000))).toMatchObject({ ok: false });
    expect(checkBundleClaims({ ...p, exp: undefined }, new Date(150_000))).toMatchObject({ ok: false, reason: 'bundle has no exp (expiry)' });
    expect(checkBundleClaims({ ...p, exp: 50 }, new Date(10_000))).toMatchObject({ ok: false });
    expect(checkBundleClaims({ ...p, servers: 'x' }, new Date(150_000))).toMatchObject({ ok: false });
  });
});

describe('Accept-Encoding', () => {
  it('prefers br, then gzip, by q-value; identity otherwise', () => {
    expect(negotiateEncoding(undefined)).toBe('identity');
    expect(negotiateEncoding('gzip, deflate, br')).toBe('br');
    expect(negotiateEncoding('gzip')).toBe('gzip');
    expect(negotiateEncoding('br;q=0.1, gzip;q=0.9')).toBe('gzip');
    expect(negotiateEncoding('br;q=0, gzip;q=0')).toBe('identity');
    expect(negotiateEncoding('*')).toBe('br');
    expect(negotiateEncoding('identity')).toBe('identity');
    expect(negotiateEncoding(';;,,q=x')).toBe('identity');
  });
});

describe('bundle settings', () => {
  it('have defaults and refuse bad values with one line naming the variable', () => {
    const c = loadConfig({});
    expect(c.bundle).toEqual({ ttlSeconds: 86_400, cacheSeconds: 60, deltaRetentionHours: 168, cacheMaxEntries: 8 });
    expect(loadConfig({ BUNDLE_CACHE_MAX_ENTRIES: '1' }).bundle.cacheMaxEntries).toBe(1);
    expect(c.gateBundle).toEqual({ url: null, jwks: null, refreshSeconds: 60, cacheFile: './data/gate-bundle.json' });
    expect(loadConfig({ GATE_BUNDLE_URL: 'https://obs.example.com/v1/bundle', GATE_BUNDLE_JWKS: '/etc/jwks.json', DATA_DIR: '/var/lib/obs/' }).gateBundle).toEqual({
      url: 'https://obs.example.com/v1/bundle',
      jwks: '/etc/jwks.json',
      refreshSeconds: 60,
      cacheFile: '/var/lib/obs/gate-bundle.json',
    });
    expect(loadConfig({ GATE_BUNDLE_URL: 'https://obs.example.com/v1/bundle', GATE_BUNDLE_CACHE_FILE: 'off' }).gateBundle.cacheFile).toBeNull();
    expectConfigRefusal('BUNDLE_TTL_SECONDS', '10');
    expectConfigRefusal('BUNDLE_CACHE_SECONDS', 'x');
    expectConfigRefusal('BUNDLE_DELTA_RETENTION_HOURS', '0');
    expectConfigRefusal('BUNDLE_CACHE_MAX_ENTRIES', '0');
    expectConfigRefusal('BUNDLE_CACHE_MAX_ENTRIES', '1001');
    expectConfigRefusal('BUNDLE_CACHE_MAX_ENTRIES', 'many');
    expectConfigRefusal('GATE_BUNDLE_URL', 'ftp://x');
    expectConfigRefusal('GATE_BUNDLE_REFRESH_SECONDS', '0');
    expectConfigRefusal('GATE_BUNDLE_JWKS', '/etc/jwks.json');
    expectConfigRefusal('GATE_BUNDLE_CACHE_FILE', '/etc/gate-bundle.json');
  });
});
