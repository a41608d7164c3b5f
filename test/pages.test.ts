// The human pages over plain HTTP: status, content type, the figures against the JSON API, and
// escaping of hostile data (server names and categories are whatever strangers report).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDemoData } from '../src/demo/load-demo.js';
import { serverStore } from '../src/store/servers.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { aggregatesSettled } from './support/settle.js';

const NOW = new Date('2026-06-15T12:00:00Z');
const HOSTILE = '<script>alert(1)</script>';
let t: TestApp;

async function page(path: string) {
  const res = await fetch(t.base + path);
  return { res, text: await res.text() };
}

beforeAll(async () => {
  t = await startTestApp({ PUBLIC_BASE_URL: 'https://observatory.example' }, { now: () => NOW });
  await loadDemoData(t.obs.db, { servers: 8, days: 4, now: NOW });
  // A server whose name and category are hostile markup, with evidence reported through the API.
  await serverStore(t.obs.db).ensure({ url: 'https://evil.example/mcp', name: HOSTILE, slug: 'evil-example', category: `x"><img src=x onerror=alert(2)>` }, new Date(NOW.getTime() - 3_600_000));
  for (let i = 0; i < 3; i++) {
    const r = await postJson(`${t.base}/api/report`, { server_url: 'https://evil.example/mcp', success: true, latency_ms: 100 + i, tool_name: HOSTILE });
    expect(r.status).toBe(200);
  }
  // Demand: pre-flight checks of a tracked server and of an unknown one.
  for (const target of ['https://weather-now.demo.example/mcp', 'https://weather-now.demo.example/mcp', 'https://unknown.example/mcp', 'https://evil.example/mcp']) {
    expect((await fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`)).status).toBe(200);
  }
}, 120_000);

afterAll(async () => {
  await t?.close();
});

describe('pages over HTTP', () => {
  it('serves /monitor as HTML with the figures of /api/stats and /api/leaderboard', async () => {
    const { res, text } = await page('/monitor');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html; charset=utf-8/);
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
    const stats = await json(fetch(`${t.base}/api/stats`));
    expect(text).toContain(`data-stat="servers">${stats.total_servers_tracked}<`);
    expect(text).toContain(`data-stat="interactions">${Number(stats.total_interactions_recorded).toLocaleString('en-US')}<`);
    const board = await json(fetch(`${t.base}/api/leaderboard?limit=100`));
    expect(board.servers.length).toBeGreaterThan(3);
    for (const s of board.servers) {
      expect(text).toContain(`href="/monitor/server/${s.slug}"`);
      expect(text).toContain(`data-score>${s.trust_score.toFixed(1)}<`);
    }
    expect(text).toContain('<svg class="spark"');
    expect(text).not.toMatch(/<script/i);
    // The demo's incident server (healthy for days, failing and slow for the last 3 hours) is
    // listed among the active anomalies with exactly the flags its trust record carries.
    const incident = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://deep-crawl.demo.example/mcp')}`));
    expect(incident.anomaly.anomaly_flags).toEqual(expect.arrayContaining(['latency_spike', 'error_rate_spike']));
    const anomalies = text.slice(text.indexOf('id="anomalies"'), text.indexOf('id="deltas"'));
    const row = anomalies.slice(anomalies.indexOf('deep-crawl.demo.example/mcp'));
    expect(row.slice(0, row.indexOf('</tr>'))).toContain(incident.anomaly.anomaly_flags.map((f: string) => `<span class="flag">${f}</span>`).join(''));
  });

  it('filters /monitor by category through a plain GET form', async () => {
    const { text } = await page('/monitor?category=weather');
    const board = await json(fetch(`${t.base}/api/leaderboard?category=weather`));
    expect(board.servers.length).toBeGreaterThan(0);
    const rows = text.match(/<tr class="r-[A-Z]+" data-url="[^"]+"/g) ?? [];
    expect(rows.map((r) => r.replace(/.*data-url="([^"]+)"/, '$1'))).toEqual(board.servers.map((s: { url: string }) => s.url));
    expect(text).toContain('<form class="inline" method="get" action="/monitor">');
  });

  it('answers a bad category with a readable 400 page, not problem JSON', async () => {
    const { res, text } = await page(`/monitor?category=${'x'.repeat(200)}`);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    // The rule is GetLeaderboardRequest.category's max_len in proto/, worded by protovalidate.
    expect(text).toContain('category: must be at most 100 characters');
  });

  it('renders a server view with charts, baseline, receipts and the badge snippet', async () => {
    const { res, text } = await page('/monitor/server/weather-now-demo-example-mcp');
    expect(res.status).toBe(200);
    const rec = await json(fetch(`${t.base}/api/trust?url=https://weather-now.demo.example/mcp`));
    expect(text).toContain(`data-field="trust_score">${rec.server.trust_score.toFixed(1)}<`);
    expect(text).toContain(`data-field="baseline_servers">${rec.category_baseline.server_count}<`);
    expect((text.match(/<svg class="chart/g) ?? []).length).toBe(3);
    // "Generated" is when this page was made (the service clock), the last report is its own line.
    const bench = await json(fetch(`${t.base}/benchmark/weather-now-demo-example-mcp`));
    expect(bench.last_updated).not.toBe(NOW.toISOString());
    expect(text).toMatch(new RegExp(`Generated <time datetime="${NOW.toISOString()}">`));
    expect(text).toContain(`last report <time data-field="last_report" datetime="${bench.last_updated}">`);
    expect(text).not.toContain(`Generated ${bench.last_updated}`);
    // Receipts the pre-flight checks issued about it, each resolvable.
    const ids = [...text.matchAll(/href="\/v1\/receipt\/([0-9a-f]{16})"/g)].map((m) => m[1]);
    // Two checks of the same server: one receipt each, or one shared when both stated the same
    // claim within a second (issue 22: one signature per claim).
    expect(ids.length).toBeGreaterThanOrEqual(1);
    expect(ids.length).toBeLessThanOrEqual(2);
    for (const id of ids) expect((await fetch(`${t.base}/v1/receipt/${id}`)).status).toBe(200);
    const badge = 'https://observatory.example/api/badge?url=https%3A%2F%2Fweather-now.demo.example%2Fmcp';
    expect(text).toContain(`[![MCP trust](${badge})](https://observatory.example/monitor/server/weather-now-demo-example-mcp)`);
    expect(text).toContain(`&lt;a href=&quot;https://observatory.example/monitor/server/weather-now-demo-example-mcp&quot;&gt;&lt;img src=&quot;${badge.replace(/&/g, '&amp;')}&quot;`);
  });

  it('answers an unknown server with a 404 page', async () => {
    const { res, text } = await page('/monitor/server/no-such-server');
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(text).toContain('Server not tracked');
  });

  it('escapes hostile names and categories on every page', async () => {
    for (const path of ['/monitor', '/monitor/server/evil-example', '/atlas/report', `/monitor?category=${encodeURIComponent('x"><img src=x onerror=alert(2)>')}`]) {
      const { res, text } = await page(path);
      expect(res.status, path).toBe(200);
      expect(text, path).not.toContain(HOSTILE);
      expect(text, path).not.toContain('<img src=x');
      expect(text, path).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    }
  });

  it('serves /atlas/report with the coverage figures', async () => {
    const { res, text } = await page('/atlas/report');
    expect(res.status).toBe(200);
    const stats = await json(fetch(`${t.base}/api/stats`));
    const demand = await json(fetch(`${t.base}/api/demand`));
    expect(text).toContain(`data-total="servers">${stats.total_servers_tracked}<`);
    expect(text).toContain(`data-total="preflights">${demand.total_preflight_checks}<`);
    expect(text).toContain(`data-total="untracked_checks">1<`);
    expect(text).toContain(`data-total="unrated">${stats.verdict_mix.unrated}<`);
    for (const c of stats.categories) expect(text).toContain(`data-category="${c.name.replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;')}"`);
    expect(text).toContain('not tracked');
  });

  it('shows a pre-flight check on /atlas/report within AGGREGATE_SETTLE_MS, although the demand figures are cached', async () => {
    const figure = (text: string, key: string) => Number(new RegExp(`data-total="${key}">([\\d,]+)<`).exec(text)![1]!.replace(/,/g, ''));
    const before = (await page('/atlas/report')).text;
    // Read again within the cache bound: served from memory.
    expect(figure((await page('/atlas/report')).text, 'preflights')).toBe(figure(before, 'preflights'));
    const res = await fetch(`${t.base}/v1/preflight?target=${encodeURIComponent('https://never-tracked.example/mcp')}`);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    await aggregatesSettled();
    const after = (await page('/atlas/report')).text;
    expect(figure(after, 'preflights')).toBe(figure(before, 'preflights') + 1);
    expect(figure(after, 'untracked_checks')).toBe(figure(before, 'untracked_checks') + 1);
    expect(after).toContain('never-tracked.example');
  });

  it('serves /drift and shows a refused or unknown target as a readable message, never a 500', async () => {
    const empty = await page('/drift');
    expect(empty.res.status).toBe(200);
    expect(empty.res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(empty.text).toContain('<form class="inline" method="get" action="/drift">');
    // A tracked server on loopback: this app runs with the default policy, so the probe is refused.
    expect((await postJson(`${t.base}/api/report`, { server_url: 'http://127.0.0.1:9/mcp', success: true, latency_ms: 5 })).status).toBe(200);
    const refused = await page(`/drift?server=${encodeURIComponent('http://127.0.0.1:9/mcp')}`);
    expect(refused.res.status).toBe(400);
    expect(refused.res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(refused.text).toContain('Target refused.');
    expect(refused.text).toContain('value="http://127.0.0.1:9/mcp"');
    const unknown = await page(`/drift?server=${encodeURIComponent('<b>no-such</b>')}`);
    expect(unknown.res.status).toBe(404);
    expect(unknown.text).toContain('Server not tracked.');
    expect(unknown.text).not.toContain('<b>no-such');
    const blank = await page('/drift?server=');
    expect(blank.res.status).toBe(400);
    // GetDriftRequest.server's `required` rule in proto/, worded by protovalidate.
    expect(blank.text).toContain('server: value is required');
  });

  it('refuses other methods on the pages', async () => {
    const res = await fetch(`${t.base}/monitor`, { method: 'POST' });
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
  });
});
