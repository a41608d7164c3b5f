import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import { request as httpRequest } from 'node:http';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SendMessageRequest } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { ClientFactory as V03ClientFactory } from '@a2a-js/sdk-v03/client';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { StatusCode } from '../gen/envoy/type/v3/http_status_pb.js';
import { createTokenBuckets } from '../src/services/rate-limits.js';
import { REST_RATE_LIMITS } from '../src/http/rate-limit.js';
import { JSONRPC_RATE_LIMITED } from '../src/agents/rate-limit.js';
import { loadConfig } from '../src/config.js';
import { expectProblem, forwardedFor, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { expectConfigRefusal } from './support/config.js';
import { backend } from './support/db.js';

describe('token buckets', () => {
  it('allow the quota, then refuse until a token has refilled', () => {
    let t = 0;
    const b = createTokenBuckets(6, { now: () => t }); // one token per 10 s
    for (let i = 0; i < 6; i++) expect(b.take('x').allowed).toBe(true);
    const no = b.take('x');
    expect(no).toMatchObject({ allowed: false, remaining: 0 });
    expect(no.retryAfterSeconds).toBe(10);
    expect(b.take('y').allowed).toBe(true); // other clients have their own bucket
    t += 10_000;
    expect(b.take('x').allowed).toBe(true);
    expect(b.take('x').allowed).toBe(false);
    t += 3_600_000;
    expect(b.take('x')).toMatchObject({ allowed: true, remaining: 5 }); // never above the quota
  });
  it('take a cost in units (bytes) over a window of any length; a cost over the quota counts as the quota', () => {
    let t = 0;
    const b = createTokenBuckets(1000, { now: () => t, windowMs: 86_400_000 }); // 1,000 bytes a day
    expect(b.take('x', 600)).toMatchObject({ allowed: true, remaining: 400 });
    const no = b.take('x', 600);
    expect(no).toMatchObject({ allowed: false, remaining: 400 });
    expect(no.retryAfterSeconds).toBe(17_280); // 200 bytes at 1,000 a day
    expect(b.take('x', 400)).toMatchObject({ allowed: true, remaining: 0 }); // what is left still fits
    t += 86_400_000;
    expect(b.take('x', 5000)).toMatchObject({ allowed: true, remaining: 0 }); // never refused for ever
    expect(b.take('y', 0)).toMatchObject({ allowed: true, remaining: 1000 });
  });
  it('keep memory bounded by evicting the least recently seen client', () => {
    const b = createTokenBuckets(10, { now: () => 0, maxClients: 3 });
    for (const c of ['a', 'b', 'c', 'a', 'd']) b.take(c);
    expect(b.size()).toBe(3);
  });
});

describe('rate limit configuration', () => {
  it('defaults sized for real traffic: a gateway asks for every request it forwards', () => {
    const c = loadConfig({});
    expect({
      probes: c.rateLimitProbesPerMinute,
      preflight: c.rateLimitPreflightPerMinute,
      gate: c.rateLimitGatePerMinute,
      mcp: c.rateLimitMcpPreflightPerMinute,
      a2a: c.rateLimitA2aSkillsPerMinute,
      a2aReads: c.rateLimitA2aReadsPerMinute,
      bundle: c.rateLimitBundlePerMinute,
      search: c.rateLimitSearchPerMinute,
      pages: c.rateLimitPagesPerMinute,
      skillTrust: c.rateLimitSkillTrustPerMinute,
    }).toEqual({ probes: 30, preflight: 600, gate: 6000, mcp: 300, a2a: 300, a2aReads: 600, bundle: 60, search: 120, pages: 300, skillTrust: 120 });
  });
  it.each([
    ['RATE_LIMIT_GATE_PER_MINUTE', '-1'],
    ['RATE_LIMIT_GATE_PER_MINUTE', 'lots'],
    ['RATE_LIMIT_MCP_PREFLIGHT_PER_MINUTE', '1.5'],
    ['RATE_LIMIT_A2A_SKILLS_PER_MINUTE', '-3'],
    ['RATE_LIMIT_A2A_READS_PER_MINUTE', '1e3'],
    ['RATE_LIMIT_BUNDLE_PER_MINUTE', 'x'],
    ['RATE_LIMIT_SEARCH_PER_MINUTE', '-1'],
    ['RATE_LIMIT_PAGES_PER_MINUTE', '2.5'],
    ['RATE_LIMIT_SKILL_TRUST_PER_MINUTE', '-2'],
  ])('refuses %s=%s with an error naming the variable', (name, value) => {
    expectConfigRefusal(name, value);
  });
});

/** A free loopback port, so PUBLIC_BASE_URL (and with it the A2A card's url) is the real address. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** A request whose path is sent exactly as written (fetch would normalise it). */
function raw(
  base: string,
  path: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/`, { method: init.method ?? 'GET', path, headers: init.headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(init.body);
  });
}

const remaining = (h: string | string[] | undefined | null) => Number(/;r=(\d+);/.exec(String(h ?? ''))?.[1] ?? NaN);

/** Percent-encodes the first letter of the path's last literal segment, and every letter of the path. */
function spellings(path: string): string[] {
  const enc = (c: string, upper: boolean) => {
    const hex = c.charCodeAt(0).toString(16);
    return `%${upper ? hex.toUpperCase() : hex}`;
  };
  const segments = path.split('/');
  const last = segments.length - 1;
  const one = segments.map((s, i) => (i === last ? s.replace(/[a-z]/i, (c) => enc(c, false)) : s)).join('/');
  const all = path.replace(/[a-z]/gi, (c) => enc(c, true));
  return [path, one, all];
}

let t: TestApp;
beforeAll(async () => {
  const port = await freePort();
  t = await startTestApp({
    PORT: String(port),
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    TRUST_PROXY: '1',
    RATE_LIMIT_PREFLIGHT_PER_MINUTE: '3',
    RATE_LIMIT_PROBES_PER_MINUTE: '3',
    RATE_LIMIT_GATE_PER_MINUTE: '3',
    RATE_LIMIT_MCP_PREFLIGHT_PER_MINUTE: '2',
    RATE_LIMIT_A2A_SKILLS_PER_MINUTE: '2',
    RATE_LIMIT_A2A_READS_PER_MINUTE: '3',
    RATE_LIMIT_BUNDLE_PER_MINUTE: '3',
    RATE_LIMIT_SEARCH_PER_MINUTE: '3',
    RATE_LIMIT_PAGES_PER_MINUTE: '3',
    RATE_LIMIT_SKILL_TRUST_PER_MINUTE: '3',
    // Nothing listens there: a skill trust read is a quick 502, never a request off this host.
    CLAWHUB_API_URL: 'http://127.0.0.1:9/api/v1',
  });
  await postJson(`${t.base}/api/report`, { server_url: 'https://rl.example.com/mcp', success: true, latency_ms: 40 });
}, 120_000);
afterAll(async () => {
  await t?.close();
});
const from = (ip: string) => ({ 'x-forwarded-for': ip });

describe(`rate limits on expensive endpoints (${backend})`, () => {
  it('pre-flight: RateLimit headers on every answer, then 429 problem+json with Retry-After', async () => {
    const url = `${t.base}/v1/preflight?target=https://rl.example.com/mcp`;
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await fetch(url, { headers: from('203.0.113.5') });
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"preflight";q=3;w=60');
      seen.push(r.headers.get('ratelimit')!);
      await r.arrayBuffer();
    }
    expect(seen.map((h) => /r=(\d+)/.exec(h)![1])).toEqual(['2', '1', '0']);
    const limited = await fetch(url, { headers: from('203.0.113.5') });
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(limited.headers.get('ratelimit')).toMatch(/^"preflight";r=0;t=\d+$/);
    const body = await expectProblem(limited, 429, 'rate_limited');
    expect(body.request_id).toBeTruthy();
    expect(body.detail).toMatch(/at most 3 pre-flight requests per minute/);
    // Errors count too and carry the headers: a bad request from a fresh address.
    const bad = await fetch(`${t.base}/v1/preflight`, { headers: from('203.0.113.6') });
    expect(bad.headers.get('ratelimit')).toMatch(/^"preflight";r=2;/);
    await expectProblem(bad, 400);
    // Another address is not affected; other endpoints are not limited.
    expect((await fetch(url, { headers: from('203.0.113.7') })).status).toBe(200);
    const trust = await fetch(`${t.base}/api/trust?url=https://rl.example.com/mcp`, { headers: from('203.0.113.5') });
    expect(trust.status).toBe(200);
    expect(trust.headers.get('ratelimit')).toBeNull();
  });

  it('the /drift form runs the same drift check and takes from the same bucket; the page without it is a page, not a probe', async () => {
    const ip = '203.0.113.10';
    for (let i = 0; i < 3; i++) {
      const page = await fetch(`${t.base}/drift`, { headers: from(ip) });
      expect(page.status).toBe(200);
      expect(page.headers.get('ratelimit-policy')).toBe('"pages";q=3;w=60');
      await page.arrayBuffer();
    }
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${t.base}/drift?server=${encodeURIComponent('http://127.0.0.1:9/mcp')}`, { headers: from(ip) });
      expect(r.headers.get('ratelimit-policy')).toBe('"probes";q=3;w=60');
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    expect(statuses).not.toContain(429);
    // The API route shares the bucket: the fourth probe of this client is refused.
    await expectProblem(await fetch(`${t.base}/api/drift?server=http://127.0.0.1:9/mcp`, { headers: from(ip) }), 429, 'rate_limited');
    await expectProblem(await fetch(`${t.base}/drift?server=x`, { headers: from(ip) }), 429, 'rate_limited');
  });

  it('probe routes are limited, whatever their answer', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await fetch(`${t.base}/api/drift?server=http://127.0.0.1:9/mcp`, { headers: from('203.0.113.9') });
      expect(r.headers.get('ratelimit-policy')).toBe('"probes";q=3;w=60');
      statuses.push(r.status);
      if (i === 3) await expectProblem(r, 429, 'rate_limited');
      else await r.arrayBuffer();
    }
    expect(statuses.slice(0, 3)).not.toContain(429);
    expect(statuses.slice(0, 3).every((s) => s < 500 || s === 502)).toBe(true);
  });
});

// Finding 7 of issue 17: limits compared the raw URL while the router decodes it, so
// "/v1/%70reflight" was a pre-flight without a limit. Limits now belong to the matched route.
describe(`one bucket per route, however the URL is spelled (${backend})`, () => {
  // Every limited REST route with a request its handler accepts (or refuses quickly).
  const requests: Record<string, { path: string; query?: string; headers?: Record<string, string>; method?: string }> = {
    '/api/drift': { path: '/api/drift', query: '?server=http://127.0.0.1:9/mcp' },
    '/api/agent-readiness': { path: '/api/agent-readiness', query: '?url=http://127.0.0.1:9/mcp' },
    '/api/agency-checklist': { path: '/api/agency-checklist', query: '?url=http://127.0.0.1:9/mcp' },
    '/api/compliance': { path: '/api/compliance', query: '?server_url=https://rl.example.com/mcp' },
    '/v1/compliance': { path: '/v1/compliance', query: '?server=http://127.0.0.1:9/mcp' },
    '/v1/preflight': { path: '/v1/preflight', query: '?target=https://rl.example.com/mcp' },
    '/v1/erc8004-attestation': { path: '/v1/erc8004-attestation', query: '?url=https://rl.example.com/mcp' },
    '/v1/behavioral-evidence': { path: '/v1/behavioral-evidence', query: '?url=https://rl.example.com/mcp' },
    '/v1/gate': { path: '/v1/gate', headers: { 'x-mcp-server': 'https://rl.example.com/mcp' } },
    '/v1/gate/*': { path: '/v1/gate/weather/mcp', headers: { 'x-mcp-server': 'https://rl.example.com/mcp' }, method: 'POST' },
    '/v1/bundle': { path: '/v1/bundle' },
    '/v1/trust': { path: '/v1/trust', query: '?registry=clawhub&skill=gog' },
  };

  it('covers every limited route', () => {
    expect(Object.keys(requests).sort()).toEqual([...REST_RATE_LIMITS.keys()].sort());
  });

  let n = 0;
  it.each(Object.keys(requests))('%s: plain and percent-encoded spellings take from one bucket, then 429', async (route) => {
    const r = requests[route]!;
    const ip = `198.51.100.${++n}`;
    const policy = REST_RATE_LIMITS.get(route)!;
    const [plain, one, all] = spellings(r.path);
    expect(new Set([plain, one, all]).size).toBe(3);
    const seen: number[] = [];
    for (const p of [plain, one, all]) {
      const res = await raw(t.base, `${p}${r.query ?? ''}`, { method: r.method, headers: { ...from(ip), ...r.headers } });
      // Routed to the handler (its own answers may be 404 not_tracked), not the router's 404.
      expect(res.body, p).not.toMatch(/"code":"not_found"/);
      expect(res.headers['ratelimit-policy'], p).toBe(`"${policy}";q=3;w=60`);
      seen.push(remaining(res.headers['ratelimit']));
    }
    expect(seen).toEqual([2, 1, 0]);
    const refused = await raw(t.base, `${one}${r.query ?? ''}`, { method: r.method, headers: { ...from(ip), ...r.headers } });
    expect(refused.status).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'rate_limited', status: 429 });
  });

  it('OPTIONS on /v1/gate is a decision like any other method: it is counted', async () => {
    const ip = '198.51.100.60';
    const h = { ...from(ip), 'x-mcp-server': 'https://rl.example.com/mcp' };
    for (let i = 0; i < 3; i++) expect((await raw(t.base, '/v1/gate', { method: 'OPTIONS', headers: h })).status).not.toBe(429);
    expect((await raw(t.base, '/v1/gate', { method: 'OPTIONS', headers: h })).status).toBe(429);
  });

  it('Connect methods share the bucket of their REST twin, whatever the path spelling', async () => {
    const ip = '198.51.100.70';
    const rest = await fetch(`${t.base}/v1/preflight?target=https://rl.example.com/mcp`, { headers: from(ip) });
    expect(remaining(rest.headers.get('ratelimit'))).toBe(2);
    const connectJson = (path: string) =>
      raw(t.base, path, { method: 'POST', headers: { ...from(ip), 'content-type': 'application/json' }, body: JSON.stringify({ target: 'https://rl.example.com/mcp' }) });
    const encoded = await connectJson('/observatory.v1.TrustService/%50reflight');
    expect(encoded.status).toBe(200);
    expect(remaining(encoded.headers['ratelimit'])).toBe(1);
    // The official Connect client sees the same bucket, then RESOURCE_EXHAUSTED with Retry-After.
    const client = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip)] }));
    let header: Headers | undefined;
    await client.preflight({ target: 'https://rl.example.com/mcp' }, { onHeader: (h) => (header = h) });
    expect(remaining(header?.get('ratelimit'))).toBe(0);
    const err = await client.preflight({ target: 'https://rl.example.com/mcp' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(err?.rawMessage).toMatch(/at most 3 pre-flight requests per minute/);
    expect(Number(err?.metadata.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Signed answers share the pre-flight bucket, on both doors: the ERC-8004 attestation signs
    // and stores a receipt for any url= (it was limited by nothing: a row per call), the
    // behavioral evidence signs one (0.4 ms of CPU a request measured, ten trust reads' worth).
    const ip3 = '198.51.100.72';
    const receipts = createClient(ReceiptService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip3)] }));
    const pre = await fetch(`${t.base}/v1/preflight?target=https://rl.example.com/mcp`, { headers: from(ip3) });
    expect(remaining(pre.headers.get('ratelimit'))).toBe(2);
    const erc = await fetch(`${t.base}/v1/erc8004-attestation?url=https://made-up-1.example.com/mcp`, { headers: from(ip3) });
    expect(erc.status).toBe(200);
    expect(erc.headers.get('ratelimit-policy')).toBe('"preflight";q=3;w=60');
    expect(remaining(erc.headers.get('ratelimit'))).toBe(1);
    let evidenceHeader: Headers | undefined;
    await receipts.getBehavioralEvidence({ url: 'https://made-up-2.example.com/mcp' }, { onHeader: (h) => (evidenceHeader = h) });
    expect(remaining(evidenceHeader?.get('ratelimit'))).toBe(0);
    await expectProblem(await fetch(`${t.base}/v1/behavioral-evidence?url=https://made-up-3.example.com/mcp`, { headers: from(ip3) }), 429, 'rate_limited');
    await expectProblem(await fetch(`${t.base}/v1/erc8004-attestation?url=https://made-up-4.example.com/mcp`, { headers: from(ip3) }), 429, 'rate_limited');
    const ercErr = await receipts.getErc8004Attestation({ url: 'https://made-up-5.example.com/mcp' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(ercErr?.code).toBe(Code.ResourceExhausted);
    expect(Number(ercErr?.metadata.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Probes too: GetDrift spelled differently shares /api/drift's bucket.
    const ip2 = '198.51.100.71';
    await fetch(`${t.base}/api/drift?server=http://127.0.0.1:9/mcp`, { headers: from(ip2) });
    const drift = await raw(t.base, '/observatory.v1.TrustService/%47etDrift', {
      method: 'POST',
      headers: { ...from(ip2), 'content-type': 'application/json' },
      body: JSON.stringify({ server: 'http://127.0.0.1:9/mcp' }),
    });
    expect(drift.headers['ratelimit-policy']).toBe('"probes";q=3;w=60');
    expect(remaining(drift.headers['ratelimit'])).toBe(1);
  });
});

// Issue 23: a search over the servers without evidence reads the servers table; it was not
// limited, so one client cycling search texts could keep the database busy.
describe(`searched lists are limited per client network (${backend})`, () => {
  it('leaderboard, /monitor and /atlas/report searches share one bucket, then 429 problem+json; unsearched pages are not counted', async () => {
    const ip = '198.51.100.120';
    const searched = [`/api/leaderboard?q=rl`, `/monitor?q=%20weather`, `/atlas/report?%71=acme`];
    for (const path of searched) {
      const r = await raw(t.base, path, { headers: from(ip) });
      expect(r.status, path).toBe(200);
      expect(r.headers['ratelimit-policy'], path).toBe('"search";q=3;w=60');
    }
    // Unsearched (or blank-searched) lists take nothing from it: the API carries no header, a
    // page takes from the pages bucket instead.
    for (const path of ['/api/leaderboard', '/api/stats']) {
      const r = await raw(t.base, path, { headers: from(ip) });
      expect(r.status, path).toBe(200);
      expect(r.headers['ratelimit'], path).toBeUndefined();
    }
    for (const path of ['/monitor?q=', '/atlas/report?q=%20%20']) {
      const r = await raw(t.base, path, { headers: from(ip) });
      expect(r.status, path).toBe(200);
      expect(r.headers['ratelimit-policy'], path).toBe('"pages";q=3;w=60');
    }
    const refused = await fetch(`${t.base}/api/leaderboard?q=another`, { headers: from(ip) });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await expectProblem(refused, 429, 'rate_limited')).detail).toMatch(/at most 3 searched list requests per minute/);
    const page = await raw(t.base, '/monitor?q=x', { headers: from(ip) });
    expect(page.status).toBe(429);
    expect(JSON.parse(page.body)).toMatchObject({ code: 'rate_limited', status: 429 });
    // Another network is not affected.
    expect((await fetch(`${t.base}/api/leaderboard?q=rl`, { headers: from('198.51.100.121') })).status).toBe(200);
  });

  it('the HTML pages share one bucket per client network, then 429 problem+json with Retry-After', async () => {
    const ip = '198.51.100.130';
    const pages = ['/monitor', '/monitor/server/rl-example-com-mcp', '/atlas/report'];
    const seen: string[] = [];
    for (const path of pages) {
      const r = await raw(t.base, path, { headers: from(ip) });
      expect(r.status, path).toBe(200);
      expect(r.headers['ratelimit-policy'], path).toBe('"pages";q=3;w=60');
      seen.push(String(r.headers['ratelimit'] ?? ''));
    }
    expect(seen.map((h) => /;r=(\d+)/.exec(h)?.[1])).toEqual(['2', '1', '0']);
    // Every page, /drift's form included (without `server` it probes nothing) and HEAD.
    for (const [path, method] of [['/drift', 'GET'], ['/monitor', 'HEAD']] as const) {
      const refused = await fetch(`${t.base}${path}`, { method, headers: from(ip) });
      expect(refused.status, path).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      if (method === 'GET') expect((await expectProblem(refused, 429, 'rate_limited')).detail).toMatch(/at most 3 page requests per minute/);
    }
    // The API is not counted, and another network has its own bucket.
    expect((await fetch(`${t.base}/api/leaderboard`, { headers: from(ip) })).status).toBe(200);
    expect((await fetch(`${t.base}/monitor`, { headers: from('198.51.100.131') })).status).toBe(200);
  });

  it('the Connect GetLeaderboard with a search takes from the same bucket', async () => {
    const ip = '198.51.100.122';
    const client = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip)] }));
    await client.getLeaderboard({}); // not a search: not counted
    for (let i = 0; i < 2; i++) await client.getLeaderboard({ q: 'rl' });
    expect((await fetch(`${t.base}/api/leaderboard?q=rl`, { headers: from(ip) })).status).toBe(200);
    const err = await client.getLeaderboard({ q: 'rl' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(err?.rawMessage).toMatch(/at most 3 searched list requests per minute/);
  });

  it('a page of one demand window (?window=, Connect GetDemand with a window) takes from the same bucket; the cached unpaged demand does not', async () => {
    const ip = '198.51.100.123';
    const client = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip)] }));
    for (let i = 0; i < 3; i++) {
      const r = await raw(t.base, '/api/demand', { headers: from(ip) });
      expect(r.status).toBe(200);
      expect(r.headers['ratelimit']).toBeUndefined();
      await client.getDemand({});
    }
    const paged = await raw(t.base, '/api/demand?window=30d&limit=5', { headers: from(ip) });
    expect(paged.status).toBe(200);
    expect(paged.headers['ratelimit-policy']).toBe('"search";q=3;w=60');
    await client.getDemand({ window: 'alltime' });
    await client.getDemand({ window: '7d', limit: 2 });
    const refused = await fetch(`${t.base}/api/demand?window=24h`, { headers: from(ip) });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    await expectProblem(refused, 429, 'rate_limited');
    const err = await client.getDemand({ window: '24h' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect((await raw(t.base, '/api/demand', { headers: from(ip) })).status).toBe(200);
  });
});

describe(`the gate, MCP preflight_check and A2A skills have limits of their own (${backend})`, () => {
  it('gate: /v1/gate and the gRPC Check share one bucket per gateway; Check answers a 429 denied_response', async () => {
    const ip = '198.51.100.80';
    const check = createClient(Authorization, createGrpcTransport({ baseUrl: t.base, interceptors: [forwardedFor(ip)] }));
    const req = { attributes: { request: { http: { host: 'rl.example.com', path: '/mcp', scheme: 'https' } } } };
    expect((await fetch(`${t.base}/v1/gate`, { headers: { ...from(ip), 'x-mcp-server': 'https://rl.example.com/mcp' } })).status).not.toBe(429);
    expect((await check.check(req)).status?.code).not.toBe(8);
    expect((await check.check(req)).status?.code).not.toBe(8);
    const refused = await check.check(req);
    expect(refused.status?.code).toBe(8); // RESOURCE_EXHAUSTED: a definite answer, not a transport error
    if (refused.httpResponse.case !== 'deniedResponse') throw new Error('expected a denied_response');
    expect(refused.httpResponse.value.status?.code).toBe(StatusCode.TooManyRequests);
    const headers = Object.fromEntries(refused.httpResponse.value.headers.map((h) => [h.header?.key, h.header?.value]));
    expect(Number(headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(headers['ratelimit-policy']).toBe('"gate";q=3;w=60');
    expect(JSON.parse(refused.httpResponse.value.body)).toMatchObject({ code: 'rate_limited', status: 429 });
    const http = await fetch(`${t.base}/v1/gate`, { headers: { ...from(ip), 'x-mcp-server': 'https://rl.example.com/mcp' } });
    expect((await expectProblem(http, 429, 'rate_limited')).detail).toMatch(/at most 3 gate decisions per minute/);
  });

  it('MCP: preflight_check calls are limited per call with a JSON-RPC error, 429 and Retry-After; other tools are not', async () => {
    const ip = '198.51.100.90';
    const client = new Client({ name: 'rl-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.base}/mcp`), { requestInit: { headers: from(ip) } }));
    try {
      for (let i = 0; i < 2; i++) {
        const r = await client.callTool({ name: 'preflight_check', arguments: { target: 'https://rl.example.com/mcp' } });
        expect(r.isError).toBeFalsy();
      }
      const err = await client.callTool({ name: 'preflight_check', arguments: { target: 'https://rl.example.com/mcp' } }).then(
        () => null,
        (e: unknown) => e as Error & { code?: number },
      );
      expect(err?.code).toBe(429);
      expect(err?.message).toMatch(/at most 2 MCP preflight_check calls per minute/);
      // Reads do not sign or store: check_trust is not limited.
      for (let i = 0; i < 3; i++) expect((await client.callTool({ name: 'check_trust', arguments: { server: 'https://rl.example.com/mcp' } })).isError).toBeFalsy();
    } finally {
      await client.close();
    }
    // A raw call, on a percent-encoded path: same bucket, the refusal's exact shape.
    const res = await raw(t.base, '/%6Dcp', {
      method: 'POST',
      headers: { ...from(ip), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'preflight_check', arguments: { target: 'https://rl.example.com/mcp' } } }),
    });
    expect(res.status).toBe(429);
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(res.headers['ratelimit-policy']).toBe('"mcp_preflight";q=2;w=60');
    expect(JSON.parse(res.body)).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: { code: JSONRPC_RATE_LIMITED, message: expect.stringMatching(/rate limited/), data: { retry_after_seconds: expect.any(Number), limit: 2, window_seconds: 60, policy: 'mcp_preflight' } },
    });
  });

  it('A2A: each skill invocation takes a token; a single refusal is 429, a batch answers per call', async () => {
    const ip = '198.51.100.100';
    const send = (id: number) => ({
      jsonrpc: '2.0',
      id,
      method: 'message/send',
      params: { message: { role: 'user', parts: [{ kind: 'text', text: 'preflight https://rl.example.com/mcp' }], messageId: `m-${id}-${Math.random()}`, kind: 'message' } },
    });
    const first = await postJson(`${t.base}/a2a`, send(1), from(ip));
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit')).toMatch(/^"a2a_skills";r=1;/);
    const task = (await json(first)).result;
    expect(task.status.state).toBe('completed');
    // A batch: the second invocation fits, the third is refused; tasks/get is not a skill.
    const batch = await postJson(`${t.base}/a2a`, [send(2), send(3), { jsonrpc: '2.0', id: 4, method: 'tasks/get', params: { id: task.id } }], from(ip));
    expect(batch.status).toBe(200);
    expect(Number(batch.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const answers = await json(batch);
    expect(answers[0].result.status.state).toBe('completed');
    expect(answers[1]).toMatchObject({ id: 3, error: { code: JSONRPC_RATE_LIMITED, message: expect.stringMatching(/at most 2 A2A skill invocations per minute/) } });
    expect(answers[2].result.id).toBe(task.id);
    const single = await raw(t.base, '/%61%32a', { method: 'POST', headers: { ...from(ip), 'content-type': 'application/json' }, body: JSON.stringify(send(5)) });
    expect(single.status).toBe(429);
    expect(Number(single.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(single.body)).toMatchObject({ jsonrpc: '2.0', id: 5, error: { code: JSONRPC_RATE_LIMITED, data: { policy: 'a2a_skills', limit: 2 } } });
  });

  it('A2A: each task read (GetTask, ListTasks, CancelTask, SubscribeToTask, their 0.3 names) takes a token of its own limit', async () => {
    // Before, reads took no token: a client could send batch after batch of 50 reads of large tasks.
    const ip = '198.51.100.101';
    const V1 = { ...from(ip), 'A2A-Version': '1.0' };
    const reads = [
      { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'no-such-task' } },
      { jsonrpc: '2.0', id: 2, method: 'ListTasks', params: { contextId: 'ctx-reads' } },
      { jsonrpc: '2.0', id: 3, method: 'CancelTask', params: { id: 'no-such-task' } },
      { jsonrpc: '2.0', id: 4, method: 'GetTask', params: { id: 'no-such-task' } },
    ];
    const res = await postJson(`${t.base}/a2a`, reads, V1);
    expect(res.status).toBe(200);
    expect(res.headers.get('ratelimit')).toMatch(/^"a2a_reads";r=0;/);
    const answers = await json(res);
    expect(answers.slice(0, 3).map((a: { error?: { code: number } }) => a.error?.code)).toEqual([-32001, undefined, -32001]);
    expect(answers[3]).toMatchObject({ id: 4, error: { code: JSONRPC_RATE_LIMITED, data: { policy: 'a2a_reads', limit: 3 } } });
    // Alone, a refused read is a 429; the 0.3 names take from the same bucket.
    const single = await postJson(`${t.base}/a2a`, { jsonrpc: '2.0', id: 5, method: 'tasks/get', params: { id: 'no-such-task' } }, from(ip));
    expect(single.status).toBe(429);
    expect((await json(single)).error).toMatchObject({ code: JSONRPC_RATE_LIMITED, message: expect.stringMatching(/A2A task reads/) });
    // Another network is not affected.
    expect((await json(postJson(`${t.base}/a2a`, { jsonrpc: '2.0', id: 6, method: 'tasks/get', params: { id: 'no-such-task' } }, from('198.51.100.102')))).error.code).toBe(-32001);
  });

  it('A2A: the stock @a2a-js/sdk 0.3 client surfaces the refusal with its message', async () => {
    // The SDK sends from 127.0.0.1 (no X-Forwarded-For), a bucket no other test uses.
    const client = await new V03ClientFactory().createFromUrl(t.base);
    const msg = () => ({ message: { kind: 'message' as const, role: 'user' as const, messageId: crypto.randomUUID(), parts: [{ kind: 'text' as const, text: 'trust score for https://rl.example.com/mcp' }] } });
    await client.sendMessage(msg());
    await client.sendMessage(msg());
    const err = await client.sendMessage(msg()).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/rate limited: at most 2 A2A skill invocations per minute/);
  });

  it('A2A: the stock @a2a-js/sdk 1.x client (SendMessage) takes from the same limit', async () => {
    // Same 127.0.0.1 bucket as the 0.3 client above, which emptied it: SendMessage is refused too.
    const client = await new ClientFactory().createFromUrl(t.base);
    const msg = SendMessageRequest.fromJSON({ message: { role: 'ROLE_USER', messageId: crypto.randomUUID(), parts: [{ text: 'trust score for https://rl.example.com/mcp' }] } });
    const err = await client.sendMessage(msg).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/rate limited: at most 2 A2A skill invocations per minute/);
  });
});
