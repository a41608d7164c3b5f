import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { serverStore } from '../src/store/servers.js';
import { telemetryStore, type IngestRow } from '../src/store/telemetry.js';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, foldRollups } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';

const HOUR = 3_600_000;
const T0 = new Date('2026-03-01T12:30:00Z');
let clock = T0;
let t: TestApp;

const GOOD = 'https://good-search.example.com/mcp';
const BAD = 'https://bad-search.example.com/mcp';
const SPIKY = 'https://spiky-weather.example.com/mcp';
const NEW = 'https://fresh-tools.example.com/mcp';

/** Seeds hourly traffic through the same store function ingestion uses. */
async function seed(url: string, fromHoursAgo: number, toHoursAgo: number, perHour: number, f: (i: number) => { success: boolean; latency: number; status?: number }) {
  const servers = serverStore(t.obs.db);
  const name = new URL(url).host + new URL(url).pathname;
  const category = url.includes('search') ? 'search' : 'weather';
  const s = await servers.ensure({ url, name, slug: name.replace(/[^a-z0-9]+/g, '-'), category }, new Date(T0.getTime() - 72 * HOUR));
  const rows: IngestRow[] = [];
  for (let h = fromHoursAgo; h > toHoursAgo; h--) {
    for (let i = 0; i < perHour; i++) {
      const r = f(i);
      rows.push({
        serverId: s.id,
        at: new Date(T0.getTime() - h * HOUR + i * 1000),
        source: `addr:seed${i % 4}`,
        report: { server_url: url, success: r.success, latency_ms: r.latency, tool_name: null, http_status: r.status ?? (r.success ? 200 : 500) },
      });
    }
  }
  await telemetryStore(t.obs.db).insertMany(rows);
}

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', PUBLIC_BASE_URL: 'https://observatory.example.org' }, { now: () => clock });
  // Phase 1: two days of history up to 25 hours ago, then a snapshot at that time.
  await seed(GOOD, 72, 25, 20, () => ({ success: true, latency: 90 }));
  await seed(BAD, 72, 25, 20, (i) => ({ success: i % 10 !== 0, latency: 120 }));
  await seed(SPIKY, 72, 25, 20, (i) => ({ success: i % 20 !== 0, latency: 100 + (i % 5) }));
  clock = new Date(T0.getTime() - 25 * HOUR);
  expect((await fetch(`${t.base}/api/leaderboard`)).status).toBe(200);
  // Phase 2: the last day. BAD degrades; SPIKY fails hard in the last hours.
  clock = T0;
  await seed(GOOD, 25, 0, 20, () => ({ success: true, latency: 90 }));
  await seed(BAD, 25, 0, 20, (i) => ({ success: i % 2 === 0, latency: 900 }));
  await seed(SPIKY, 25, 2, 20, (i) => ({ success: i % 20 !== 0, latency: 100 + (i % 5) }));
  await seed(SPIKY, 2, 0, 20, (i) => ({ success: i % 4 === 0, latency: 100, status: i % 4 === 0 ? 200 : 503 }));
  // A brand-new server, reported over HTTP.
  for (let i = 0; i < 3; i++) expect((await postJson(`${t.base}/api/report`, { server_url: NEW, success: true, latency_ms: 50, tool_name: 'do_task' })).status).toBe(200);
});
afterAll(async () => {
  await t?.close();
});

const get = async (path: string) => {
  const res = await fetch(`${t.base}${path}`);
  expect(res.status, path).toBe(200);
  return res.json() as Promise<any>;
};

describe(`trust reads over HTTP (${backend})`, () => {
  it('/api/trust answers the complete record with breakdown, baseline and anomalies', async () => {
    const good = await get(`/api/trust?url=${encodeURIComponent(GOOD)}`);
    expect(good.server).toMatchObject({ url: GOOD, category: 'search' });
    expect(good.verdict).toBe('PASS');
    expect(good.metrics.total_interactions).toBe(72 * 20);
    expect(good.metrics.success_rate).toBe(1);
    expect(good.category_baseline).toMatchObject({ category: 'search', server_count: 2 });
    expect(good.category_baseline.avg_latency_ms).toBeGreaterThan(90);
    expect(good.category_baseline.p95_latency_ms).toBeGreaterThan(0);
    expect(good.anomaly).toEqual({ is_anomalous: false, anomaly_flags: [] });
    const b = good.score_breakdown;
    expect(b.model).toBe('source-robust-v2');
    expect(b.evidence_reports).toBe(72 * 20);
    expect(b.independent_sources).toBe(4);
    expect(b.prior_points + b.success_points + b.latency_points - b.anomaly_penalty).toBeCloseTo(good.server.trust_score, 0);

    const spiky = await get(`/api/trust?url=${encodeURIComponent(SPIKY)}`);
    expect(spiky.anomaly.is_anomalous).toBe(true);
    expect(spiky.anomaly.anomaly_flags).toEqual(expect.arrayContaining(['error_rate_spike', 'burst_5xx']));
    expect(spiky.score_breakdown.anomaly_penalty).toBeGreaterThan(0);

    const bad = await get(`/api/trust?url=${encodeURIComponent(BAD)}`);
    expect(bad.server.trust_score).toBeLessThan(good.server.trust_score);
  });

  it('/api/leaderboard ranks, filters and limits', async () => {
    const all = await get('/api/leaderboard');
    expect(all.category).toBe('all');
    expect(all.total_results).toBe(4);
    const scores = all.servers.map((s: any) => s.trust_score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
    expect(Object.keys(all.servers[0]).sort()).toEqual(
      ['url', 'name', 'slug', 'category', 'trust_score', 'verdict', 'success_rate', 'avg_latency_ms', 'total_interactions', 'tracked_since', 'rank'].sort(),
    );
    const search = await get('/api/leaderboard?category=search&limit=1');
    expect(search).toMatchObject({ category: 'search', total_results: 2 });
    expect(search.servers.map((s: any) => s.url)).toEqual([GOOD]);
    expect((await get('/api/leaderboard?limit=100')).servers).toHaveLength(4);
    expect((await get('/api/leaderboard?category=nothing-here')).servers).toEqual([]);
    for (const bad of ['101', '0', '-1', 'abc', '1.5', '', '99999999999']) {
      await expectProblem(await fetch(`${t.base}/api/leaderboard?limit=${bad}`), 400, 'invalid_argument');
    }
  });

  it('/api/stats summarises the index without scanning telemetry', async () => {
    const s = await get('/api/stats');
    expect(s).toMatchObject({ total_servers_tracked: 4, total_interactions_recorded: 72 * 20 * 3 + 3 });
    expect(s.interactions_last_24h).toBeGreaterThan(0);
    expect(s.verdict_mix.pass + s.verdict_mix.uncertain + s.verdict_mix.fail + s.verdict_mix.unrated).toBe(4);
    expect(s.categories.find((c: any) => c.name === 'search')).toMatchObject({ servers: 2 });
    expect(typeof s.average_trust_score).toBe('number');
  });

  it('/benchmark/{slug} reports grade, reliability, latency and volume; 404 when untracked', async () => {
    const b = await get('/benchmark/good-search-example-com-mcp');
    expect(b).toMatchObject({ server_url: GOOD, verdict: 'PASS', server_slug: 'good-search-example-com-mcp' });
    expect(['A', 'B', 'C']).toContain(b.trust_grade);
    expect(b.reliability).toMatchObject({ success_rate_7d: 1, success_rate_30d: 1, success_rate_alltime: 1, trend: 'insufficient_data' });
    expect(b.latency.avg_ms).toBe(90);
    expect(b.latency.p95_ms).toBeGreaterThan(0);
    expect(b.volume).toMatchObject({ total_calls: 1440, calls_7d: 1440 });
    expect(b.volume.days_observed).toBeGreaterThanOrEqual(3);
    expect((await get(`/benchmark/${encodeURIComponent(BAD)}`)).server_url).toBe(BAD);
    await expectProblem(await fetch(`${t.base}/benchmark/no-such-server`), 404, 'not_tracked');
  });

  it('/api/sla-tier certifies one server or gives the distribution; 404 when untracked', async () => {
    const one = await get(`/api/sla-tier?server=${encodeURIComponent(GOOD)}`);
    expect(one).toMatchObject({ schema: 'mcp-sla-tier-certification-v1.0', server_url: GOOD, interactions_30d: 1440 });
    expect(['Platinum', 'Gold', 'Silver']).toContain(one.tier);
    expect(one.badge_url).toBe(`https://observatory.example.org/api/badge?url=${encodeURIComponent(GOOD)}`);
    expect(one.criteria.min_interactions_30d).toBe(30);
    const fresh = await get(`/api/sla-tier?server=fresh-tools-example-com-mcp`);
    expect(fresh.tier).toBe('Unrated'); // 3 reports: fewer than 30 in 30 days
    const dist = await get('/api/sla-tier');
    expect(dist.schema).toBe('mcp-sla-tier-certification-v1.0');
    expect(Object.keys(dist.distribution).sort()).toEqual(['Bronze', 'Gold', 'Platinum', 'Silver', 'Unrated']);
    expect(Object.values(dist.distribution).reduce((a: number, b) => a + (b as number), 0)).toBe(4);
    await expectProblem(await fetch(`${t.base}/api/sla-tier?server=nope.example.com`), 404, 'not_tracked');
    // server is optional (SPEC 4.1): empty means absent, the distribution.
    expect((await get('/api/sla-tier?server=')).distribution).toEqual(dist.distribution);
  });

  it('/api/trust-delta groups new, degraded and at-risk servers over the window', async () => {
    const d = await get('/api/trust-delta');
    expect(d).toMatchObject({ schema: 'mcp-trust-delta-v1.0', window: '24h' });
    expect(d.servers_new.map((s: any) => s.url)).toEqual([NEW]);
    const degraded = d.servers_degraded.find((s: any) => s.url === BAD);
    expect(degraded).toBeDefined();
    expect(degraded.delta).toBeLessThan(-5);
    expect(degraded.delta).toBeCloseTo(degraded.trust_score - degraded.prev_score, 1);
    expect(d.summary.servers_degraded).toBe(d.servers_degraded.length);
    expect((await get('/api/trust-delta?window=7d')).window).toBe('7d');
    expect((await get('/api/trust-delta?window=48h')).window).toBe('48h');
    for (const w of ['1h', '24H', '', 'toString']) await expectProblem(await fetch(`${t.base}/api/trust-delta?window=${w}`), 400, 'invalid_argument');
  });

  it('/api/badge renders an SVG with score and verdict, "unrated" when untracked', async () => {
    const res = await fetch(`${t.base}/api/badge?url=${encodeURIComponent(GOOD)}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^image\/svg\+xml/);
    expect(res.headers.get('cache-control')).toBe('public, max-age=300');
    const svg = await res.text();
    expect(svg).toMatch(/^<svg/);
    expect(svg).toContain('PASS');
    const unrated = await fetch(`${t.base}/api/badge?url=https://unknown.example.net`);
    expect(unrated.status).toBe(200);
    expect(await unrated.text()).toContain('unrated');
    await expectProblem(await fetch(`${t.base}/api/badge`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/badge?url=not-a-url`), 400, 'invalid_argument');
  });

  it('counts report sources without storing addresses or keys', async () => {
    const url = 'https://sources.example.com/mcp';
    await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 10 }, { 'x-forwarded-for': '203.0.113.7' });
    await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 10 }, { 'x-forwarded-for': '203.0.113.7' });
    await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 10 }, { 'x-forwarded-for': '198.51.100.9' });
    await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 10 }, { authorization: 'Bearer sk-test-secret-key' });
    const rec = await get(`/api/trust?url=${encodeURIComponent(url)}`);
    expect(rec.score_breakdown.independent_sources).toBe(3);
    await foldRollups(t.obs.db);
    const dump = JSON.stringify(await t.obs.db.query('SELECT * FROM telemetry_hourly')) + JSON.stringify(await t.obs.db.query('SELECT * FROM trust_evidence'));
    expect(dump).not.toContain('203.0.113.7');
    expect(dump).not.toContain('198.51.100.9');
    expect(dump).not.toContain('sk-test-secret-key');
  });

  it('moved paths no longer answer 501', async () => {
    for (const p of ['/api/stats', '/api/leaderboard', '/api/trust-delta', '/api/sla-tier']) expect((await fetch(`${t.base}${p}`)).status).toBe(200);
  });
});

describe(`trust reads over Connect and gRPC (${backend})`, () => {
  it('answers the same figures as REST and maps errors', async () => {
    // Earlier tests' reports settle first: two reads straddling AGGREGATE_SETTLE_MS may see two lists.
    await aggregatesSettled();
    for (const transport of [createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }), createGrpcTransport({ baseUrl: t.base })]) {
      const c = createClient(TrustService, transport);
      const lb = await c.getLeaderboard({ limit: 2 });
      const rest = await get('/api/leaderboard?limit=2');
      expect(lb.servers.map((s) => [s.url, s.trustScore])).toEqual(rest.servers.map((s: any) => [s.url, s.trust_score]));
      expect((await c.getStats({})).totalServersTracked).toBe((await get('/api/stats')).total_servers_tracked);
      expect((await c.getBenchmark({ serverSlug: 'good-search-example-com-mcp' })).serverUrl).toBe(GOOD);
      expect((await c.getSlaTier({})).distribution).toHaveProperty('Platinum');
      expect((await c.getSlaTier({ server: GOOD })).schema).toBe('mcp-sla-tier-certification-v1.0');
      expect((await c.getTrustDelta({ window: '48h' })).window).toBe('48h');
      const badge = await c.getBadge({ url: GOOD });
      expect(badge.verdict).toBe('PASS');
      expect(badge.svg).toMatch(/^<svg/);
      expect((await c.getBadge({ url: 'https://unknown.example.net' })).verdict).toBe('UNRATED');
      await expect(c.getLeaderboard({ limit: 101 })).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(c.getTrustDelta({ window: '3d' })).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(c.getBenchmark({ serverSlug: 'nope' })).rejects.toMatchObject({ code: Code.NotFound });
      await expect(c.getSlaTier({ server: 'nope' })).rejects.toMatchObject({ code: Code.NotFound });
      await expect(c.getBadge({ url: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
    }
  });

  it('gives other services a cheap score lookup', async () => {
    const server = (await serverStore(t.obs.db).resolve(GOOD))!;
    const s = await t.obs.services.trust.scoreFor(server);
    expect(s.verdict).toBe('PASS');
    expect(s.total_interactions).toBe(1440);
    expect(s.trust_score).toBe((await get(`/api/trust?url=${encodeURIComponent(GOOD)}`)).server.trust_score);
  });
});
