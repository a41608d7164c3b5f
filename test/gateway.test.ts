import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { HeaderValueOption_HeaderAppendAction } from '../gen/envoy/config/core/v3/base_pb.js';
import { StatusCode } from '../gen/envoy/type/v3/http_status_pb.js';
import { createGateService, preflightGateSource, type GateAssessment, type GateVerdictSource } from '../src/services/gate.js';
import { loadConfig } from '../src/config.js';
import { cacheLimits, setCacheLimits } from '../src/store/cache-limits.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { seedVerdicts } from './support/seed.js';
import { backend } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';

// The gate over HTTP (/v1/gate, as nginx auth_request and Envoy HTTP ext_authz call it) and over
// gRPC (envoy.service.auth.v3.Authorization/Check, with a client generated from our proto).

const PASS = 'https://pass.example.com/mcp';
const FAIL = 'https://fail.example.com/mcp';
const UNCERTAIN = 'https://uncertain.example.com/mcp';
const UNRATED = 'https://never-seen.example.com/mcp';

let t: TestApp;
let clock = Date.now();
beforeAll(async () => {
  // No route table: the request URLs below are judged as themselves (with one, only its routes
  // name upstreams: "GATE_ROUTES" below).
  t = await startTestApp({}, { now: () => new Date(clock) });
  await seedVerdicts(t.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

const gate = (headers: Record<string, string>, init: RequestInit & { path?: string } = {}) =>
  fetch(`${t.base}${init.path ?? '/v1/gate'}`, { ...init, headers: { ...headers, ...(init.headers as Record<string, string> | undefined) } });

async function expectReceipt(id: string | null, sub: string, decision: 'allow' | 'deny') {
  expect(id).toMatch(/^[0-9a-f]{16}$/);
  const rec = await json(fetch(`${t.base}/v1/receipt/${id}`));
  expect(rec.verification.valid).toBe(true);
  expect(rec.claim).toMatchObject({ kind: 'gateway', sub, gateway: { decision } });
  const v = await fetch(`${t.base}/v1/verify?jws=${encodeURIComponent(rec.jws)}`);
  expect(v.status).toBe(200);
  return rec;
}

describe(`HTTP gate /v1/gate (${backend})`, () => {
  it('allows PASS with 200, the verdict headers and a signed gateway receipt', async () => {
    const res = await gate({ 'x-mcp-server': PASS });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-trust-verdict')).toBe('PASS');
    const score = Number(res.headers.get('x-trust-score'));
    expect(score).toBeGreaterThanOrEqual(60);
    const body = await json(res);
    expect(body).toMatchObject({ allow: true, decision: 'allow', verdict: 'PASS', trust_score: score, upstream: PASS, upstream_source: 'x-mcp-server' });
    expect(body.receipt_id).toBe(res.headers.get('x-trust-receipt'));
    expect(body.receipt_url).toBe(`${t.config.publicBaseUrl}/v1/receipt/${body.receipt_id}`);
    const rec = await expectReceipt(body.receipt_id, PASS, 'allow');
    expect(rec.claim).toMatchObject({ verdict: 'PASS', trust_score: score, gateway: { via: 'http', policy: { allow_uncertain: true, allow_unrated: false } } });
  });

  it('denies FAIL with 403 problem+json carrying the decision and the same headers', async () => {
    const res = await gate({ 'x-original-url': `${FAIL}?session=abc` });
    expect(res.headers.get('x-trust-verdict')).toBe('FAIL');
    expect(Number(res.headers.get('x-trust-score'))).toBeLessThan(40);
    const receipt = res.headers.get('x-trust-receipt');
    const body = await expectProblem(res, 403, 'forbidden');
    expect(body).toMatchObject({ allow: false, verdict: 'FAIL', upstream: FAIL, upstream_source: 'x-original-url', reason: 'verdict_fail', receipt_id: receipt });
    await expectReceipt(receipt, FAIL, 'deny');
  });

  it('allows UNCERTAIN and denies UNRATED by default', async () => {
    const u = await gate({ 'x-forwarded-proto': 'https', 'x-forwarded-host': 'uncertain.example.com', 'x-original-uri': '/mcp' });
    expect(u.status).toBe(200);
    expect(u.headers.get('x-trust-verdict')).toBe('UNCERTAIN');
    const n = await gate({ 'x-mcp-server': UNRATED });
    expect(n.headers.get('x-trust-verdict')).toBe('UNRATED');
    expect(n.headers.get('x-trust-score')).toBe('null');
    expect((await expectProblem(n, 403, 'forbidden')).reason).toBe('policy_denies_unrated');
  });

  it('answers 400 problem+json when no upstream can be worked out, or it is malformed', async () => {
    await expectProblem(await gate({}), 400, 'invalid_argument');
    await expectProblem(await gate({ 'x-forwarded-host': 'a.example.com' }), 400, 'invalid_argument');
    await expectProblem(await gate({ 'x-mcp-server': 'not a url' }), 400, 'invalid_argument');
    await expectProblem(await gate({ 'x-mcp-server': 'file:///etc/passwd' }), 400, 'invalid_argument');
    await expectProblem(await gate({ 'x-original-url': `https://a.example.com/${'x'.repeat(5000)}` }), 400, 'invalid_argument');
    // Host + the path below /v1/gate is no upstream unless GATE_ROUTES maps it.
    await expectProblem(await gate({}, { path: '/v1/gate/elsewhere/mcp' }), 400, 'invalid_argument');
  });

  it('answers any method on /v1/gate and every path below it, never reading the body', async () => {
    const h = { 'x-mcp-server': PASS };
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
      const res = await gate(h, { method, path: '/v1/gate/some/original/path?q=1' });
      expect(res.status, method).toBe(200);
      expect(res.headers.get('x-trust-verdict'), method).toBe('PASS');
    }
    const head = await gate(h, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('x-trust-receipt')).toMatch(/^[0-9a-f]{16}$/);
    // Envoy may forward the original body and content type; neither matters, whatever its size.
    for (const [type, body] of [
      ['application/json', ''],
      ['application/json', '{not json'],
      ['text/plain', 'hello'],
      ['application/octet-stream', 'x'.repeat(2 * 1024 * 1024)],
    ] as const) {
      const res = await gate({ ...h, 'content-type': type }, { method: 'POST', body });
      expect(res.status, `${type} ${body.length}`).toBe(200);
    }
  });

  it('reuses a verdict for GATE_CACHE_SECONDS, still signing one receipt per decision', async () => {
    const url = 'https://flip.example.com/mcp';
    for (let i = 0; i < 20; i++) await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 40 });
    const first = await json(gate({ 'x-mcp-server': url }));
    expect(first).toMatchObject({ verdict: 'PASS', cached_verdict: false });
    for (let i = 0; i < 60; i++) await postJson(`${t.base}/api/report`, { server_url: url, success: false, latency_ms: 4000 });
    const second = await json(gate({ 'x-mcp-server': url }));
    expect(second).toMatchObject({ verdict: 'PASS', cached_verdict: true });
    expect(second.receipt_id).not.toBe(first.receipt_id);
    await expectReceipt(second.receipt_id, url, 'allow');
    clock += 5_001;
    const third = await gate({ 'x-mcp-server': url });
    expect(third.status).toBe(403);
    expect(await json(third)).toMatchObject({ verdict: 'FAIL', cached_verdict: false });
  });

  it('counts decisions as demand and never as score evidence', async () => {
    const checks = async () => {
      const demand = await json(fetch(`${t.base}/api/demand`));
      const all = demand.windows.find((w: { window: string }) => w.window === 'alltime');
      return all.servers.find((s: { target: string }) => s.target === PASS)?.checks ?? 0;
    };
    const [before, checksBefore] = await Promise.all([json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(PASS)}`)), checks()]);
    await gate({ 'x-mcp-server': PASS });
    await gate({ 'x-mcp-server': PASS }, { method: 'POST' });
    const after = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(PASS)}`));
    expect(after.metrics.total_interactions).toBe(20);
    expect(after.server.trust_score).toBe(before.server.trust_score);
    await aggregatesSettled();
    expect(await checks()).toBe(checksBefore + 2);
  });

  it('follows the policy settings: UNCERTAIN and UNRATED per configuration, FAIL always denied', async () => {
    const services = t.obs.services;
    const strict = createGateService(
      { config: { ...t.config, gate: { ...t.config.gate, allowUncertain: false, allowUnrated: true, cacheSeconds: 0 } }, now: () => new Date(clock) },
      preflightGateSource(services.preflight),
    );
    const decide = (u: string) => strict.decide({ gatewayHeaders: { 'x-mcp-server': u } }, 'http');
    expect(await decide(UNCERTAIN)).toMatchObject({ allow: false, reason: 'policy_denies_uncertain' });
    expect(await decide(UNRATED)).toMatchObject({ allow: true, reason: 'policy_allows_unrated' });
    expect(await decide(FAIL)).toMatchObject({ allow: false, reason: 'verdict_fail' });
    expect(await decide(PASS)).toMatchObject({ allow: true, reason: 'verdict_pass' });
  });
});

describe(`Envoy ext_authz gRPC: envoy.service.auth.v3.Authorization/Check (${backend})`, () => {
  const client = () => createClient(Authorization, createGrpcTransport({ baseUrl: t.base }));
  const http = (o: { headers?: Record<string, string>; host?: string; path?: string; scheme?: string }) => ({
    attributes: { request: { http: { method: 'POST', headers: o.headers ?? {}, host: o.host ?? '', path: o.path ?? '', scheme: o.scheme ?? '' } } },
  });

  it('allows PASS with ok_response headers for the upstream and the client, and dynamic metadata', async () => {
    const res = await client().check({
      attributes: { ...http({ host: 'gw.example', path: '/mcp', scheme: 'https' }).attributes, contextExtensions: { mcp_server: PASS } },
    });
    expect(res.status?.code).toBe(0);
    expect(res.httpResponse.case).toBe('okResponse');
    if (res.httpResponse.case !== 'okResponse') return;
    const headers = Object.fromEntries(res.httpResponse.value.headers.map((h) => [h.header?.key, h.header?.value]));
    expect(headers['x-trust-verdict']).toBe('PASS');
    expect(Number(headers['x-trust-score'])).toBeGreaterThanOrEqual(60);
    expect(res.httpResponse.value.headers.every((h) => h.appendAction === HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD)).toBe(true);
    expect(res.httpResponse.value.responseHeadersToAdd.map((h) => h.header?.key).sort()).toEqual(['x-trust-receipt', 'x-trust-score', 'x-trust-verdict']);
    expect(res.dynamicMetadata).toMatchObject({ trust_verdict: 'PASS', upstream: PASS, decision: 'allow' });
    const rec = await expectReceipt(headers['x-trust-receipt']!, PASS, 'allow');
    expect(rec.claim.gateway).toMatchObject({ via: 'envoy_grpc', upstream_source: 'context_extension' });
  });

  it('denies FAIL with a 403 denied_response carrying the verdict in headers and a JSON body', async () => {
    const res = await client().check(http({ host: 'fail.example.com', path: '/mcp', scheme: 'https' }));
    expect(res.status?.code).toBe(7);
    expect(res.httpResponse.case).toBe('deniedResponse');
    if (res.httpResponse.case !== 'deniedResponse') return;
    const denied = res.httpResponse.value;
    expect(denied.status?.code).toBe(StatusCode.Forbidden);
    const headers = Object.fromEntries(denied.headers.map((h) => [h.header?.key, h.header?.value]));
    expect(headers).toMatchObject({ 'x-trust-verdict': 'FAIL', 'content-type': 'application/json' });
    const body = JSON.parse(denied.body);
    expect(body).toMatchObject({ allow: false, verdict: 'FAIL', upstream: FAIL, receipt_id: headers['x-trust-receipt'] });
    await expectReceipt(body.receipt_id, FAIL, 'deny');
  });

  it("judges Envoy's own request URL when nothing names an upstream (query dropped)", async () => {
    const res = await client().check(http({ host: 'uncertain.example.com', path: '/mcp?x=1', scheme: 'https' }));
    expect(res.httpResponse.case).toBe('okResponse');
    expect(res.dynamicMetadata).toMatchObject({ upstream: UNCERTAIN, trust_verdict: 'UNCERTAIN' });
  });

  it('denies with 400 (google.rpc INVALID_ARGUMENT) when no upstream can be worked out', async () => {
    for (const req of [{}, http({}), http({ headers: { 'x-mcp-server': PASS } }), { attributes: { contextExtensions: { mcp_server: 'ftp://x' } } }]) {
      const res = await client().check(req);
      expect(res.status?.code).toBe(3);
      expect(res.httpResponse.case).toBe('deniedResponse');
      if (res.httpResponse.case !== 'deniedResponse') continue;
      expect(res.httpResponse.value.status?.code).toBe(StatusCode.BadRequest);
      expect(JSON.parse(res.httpResponse.value.body)).toMatchObject({ status: 400, code: 'invalid_argument' });
    }
  });
});

// Finding 4 of issue 17: on the gRPC Check the checked request's headers are the client's (Envoy
// forwards them all), so they must never choose which server is judged unless the operator says
// its gateway sets them (GATE_TRUSTED_HEADERS). Before the fix one forged header made FAIL pass.
describe(`Envoy ext_authz gRPC: the client cannot choose the upstream (${backend})`, () => {
  const client = () => createClient(Authorization, createGrpcTransport({ baseUrl: t.base }));
  const check = (o: { headers?: Record<string, string>; host: string; path: string; scheme?: string; ext?: Record<string, string> }) =>
    client().check({
      attributes: {
        request: { http: { method: 'POST', headers: o.headers ?? {}, host: o.host, path: o.path, scheme: o.scheme ?? 'https' } },
        contextExtensions: o.ext ?? {},
      },
    });
  const FORGED: Record<string, string>[] = [
    { 'x-mcp-server': PASS },
    { 'x-original-url': PASS },
    { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'pass.example.com', 'x-original-uri': '/mcp' },
    { 'x-mcp-server': PASS, 'x-original-url': PASS, 'x-forwarded-proto': 'https', 'x-forwarded-host': 'pass.example.com', 'x-original-uri': '/mcp' },
  ];

  it("judges the checked request's own URL: no forged header makes a FAIL server pass", async () => {
    for (const headers of FORGED) {
      const res = await check({ headers, host: 'fail.example.com', path: '/mcp?session=1' });
      expect(res.status?.code, JSON.stringify(headers)).toBe(7);
      expect(res.httpResponse.case).toBe('deniedResponse');
      expect(res.dynamicMetadata).toMatchObject({ upstream: FAIL, trust_verdict: 'FAIL', decision: 'deny' });
      if (res.httpResponse.case !== 'deniedResponse') continue;
      expect(JSON.parse(res.httpResponse.value.body)).toMatchObject({ upstream: FAIL, upstream_source: 'request', verdict: 'FAIL' });
    }
  });

  it('takes the context extension over the route table, the request URL and any header', async () => {
    const res = await check({ headers: FORGED[3], host: 'gw.test', path: '/weather/mcp', ext: { mcp_server: FAIL } });
    expect(res.dynamicMetadata).toMatchObject({ upstream: FAIL, trust_verdict: 'FAIL', decision: 'deny' });
  });

  it('answers 400 when only headers name an upstream (the checked request has no host)', async () => {
    const res = await client().check({ attributes: { request: { http: { headers: { 'x-mcp-server': PASS } } } } });
    expect(res.status?.code).toBe(3);
    if (res.httpResponse.case !== 'deniedResponse') throw new Error('expected a denied response');
    expect(res.httpResponse.value.status?.code).toBe(StatusCode.BadRequest);
    expect(JSON.parse(res.httpResponse.value.body).detail).toMatch(/mcp_server/);
  });
});

// With a route table, only its routes (and X-Mcp-Server / the context extension) name upstreams: a
// request URL no route matches has a host the client wrote, and is no upstream (400).
describe(`GATE_ROUTES (${backend})`, () => {
  let r: TestApp;
  beforeAll(async () => {
    r = await startTestApp({
      GATE_ROUTES: JSON.stringify([
        { host: 'gw.test', path_prefix: '/weather', upstream: PASS },
        { host: 'gw.test', path_prefix: '/failing', upstream: FAIL },
      ]),
    });
    await seedVerdicts(r.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
  }, 120_000);
  afterAll(async () => {
    await r?.close();
  });
  const rgate = (headers: Record<string, string>) => fetch(`${r.base}/v1/gate`, { headers });
  const rclient = () => createClient(Authorization, createGrpcTransport({ baseUrl: r.base }));
  const rcheck = (o: { headers?: Record<string, string>; host: string; path: string }) =>
    rclient().check({ attributes: { request: { http: { method: 'POST', headers: o.headers ?? {}, host: o.host, path: o.path, scheme: 'https' } } } });
  const FORGED: Record<string, string>[] = [
    { 'x-mcp-server': PASS },
    { 'x-original-url': PASS },
    { 'x-mcp-server': PASS, 'x-original-url': PASS, 'x-forwarded-proto': 'https', 'x-forwarded-host': 'pass.example.com', 'x-original-uri': '/mcp' },
  ];

  it('maps a request URL through GATE_ROUTES, including Envoy-style Host + path below /v1/gate', async () => {
    const viaHeader = await json(rgate({ 'x-original-url': 'https://gw.test/weather/mcp' }));
    expect(viaHeader).toMatchObject({ upstream: PASS, upstream_source: 'route', verdict: 'PASS' });
    // fetch will not send a foreign Host header, so a raw request does.
    const viaHost = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(`${r.base}/v1/gate/weather/mcp/tools`, { headers: { host: 'gw.test' } }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    });
    expect(viaHost.status).toBe(200);
    expect(JSON.parse(viaHost.body)).toMatchObject({ upstream: PASS, upstream_source: 'route' });
  });

  it('maps the checked request through GATE_ROUTES whatever headers the client adds', async () => {
    for (const headers of [{}, ...FORGED]) {
      const res = await rcheck({ headers, host: 'gw.test', path: '/failing/mcp' });
      expect(res.dynamicMetadata, JSON.stringify(headers)).toMatchObject({ upstream: FAIL, trust_verdict: 'FAIL', decision: 'deny' });
      if (res.httpResponse.case === 'deniedResponse') expect(JSON.parse(res.httpResponse.value.body)).toMatchObject({ upstream_source: 'route' });
    }
    const pass = await rcheck({ headers: { 'x-mcp-server': FAIL }, host: 'gw.test', path: '/weather/mcp' });
    expect(pass.httpResponse.case).toBe('okResponse');
    expect(pass.dynamicMetadata).toMatchObject({ upstream: PASS, trust_verdict: 'PASS' });
  });

  it('answers 400 for a request URL no route matches, over HTTP and gRPC; X-Mcp-Server is still used as given', async () => {
    await expectProblem(await rgate({ 'x-original-url': UNCERTAIN }), 400, 'invalid_argument');
    const res = await rcheck({ host: 'uncertain.example.com', path: '/mcp' });
    expect(res.status?.code).toBe(3);
    expect((await rgate({ 'x-mcp-server': PASS })).status).toBe(200);
  });
});

describe(`Envoy ext_authz gRPC with GATE_TRUSTED_HEADERS (headers the gateway sets) (${backend})`, () => {
  let g: TestApp;
  beforeAll(async () => {
    g = await startTestApp({ GATE_TRUSTED_HEADERS: 'X-Mcp-Server' });
    await seedVerdicts(g.base, { pass: PASS, fail: FAIL });
  }, 120_000);
  afterAll(async () => {
    await g?.close();
  });
  const client = () => createClient(Authorization, createGrpcTransport({ baseUrl: g.base }));

  it('reads a configured header before the request URL, and ignores the headers not configured', async () => {
    const res = await client().check({
      attributes: { request: { http: { headers: { 'x-mcp-server': FAIL }, host: 'pass.example.com', path: '/mcp', scheme: 'https' } } },
    });
    expect(res.httpResponse.case).toBe('deniedResponse');
    expect(res.dynamicMetadata).toMatchObject({ upstream: FAIL, trust_verdict: 'FAIL' });
    if (res.httpResponse.case === 'deniedResponse') expect(JSON.parse(res.httpResponse.value.body)).toMatchObject({ upstream_source: 'x-mcp-server' });
    // X-Original-URL is not configured as gateway-set: the request's own URL is judged.
    const other = await client().check({
      attributes: { request: { http: { headers: { 'x-original-url': PASS }, host: 'fail.example.com', path: '/mcp', scheme: 'https' } } },
    });
    expect(other.dynamicMetadata).toMatchObject({ upstream: FAIL, trust_verdict: 'FAIL' });
  });

  it('reads raw header lists (encode_raw_headers) too', async () => {
    const raw = await client().check({
      attributes: { request: { http: { headerMap: { headers: [{ key: 'X-Mcp-Server', rawValue: new TextEncoder().encode(PASS) }] } } } },
    });
    expect(raw.httpResponse.case).toBe('okResponse');
    expect(raw.dynamicMetadata).toMatchObject({ upstream: PASS, trust_verdict: 'PASS' });
  });
});

describe('the gate\'s caches are bounded by CACHE_MAX_ENTRIES (verdicts per upstream, facts per tool)', () => {
  it('holds at most that many upstreams and tools, dropping the oldest first', async () => {
    const at = new Date('2026-11-25T12:00:00Z');
    const assessed = new Map<string, number>();
    const toolReads = new Map<string, number>();
    const source: GateVerdictSource = {
      async assess(upstream) {
        assessed.set(upstream, (assessed.get(upstream) ?? 0) + 1);
        return { verdict: 'PASS', trustScore: 80, serverId: 1 } satisfies GateAssessment;
      },
      async tool(_a, tool) {
        toolReads.set(tool, (toolReads.get(tool) ?? 0) + 1);
        return { drift: null, evidence: { verdict: 'UNRATED', trustScore: null, reports: 0 } };
      },
      async record() {
        return { receiptId: null, jws: null };
      },
    };
    const config = loadConfig({});
    expect(config.gate.cacheSeconds).toBeGreaterThan(0);
    const gateService = createGateService({ config, now: () => at }, source);
    const up = (i: number) => `https://bounded-${i}.example.com/mcp`;
    const decide = (u: string, tool?: string) =>
      gateService.decide({ gatewayHeaders: { 'x-mcp-server': u }, mcpHeaders: tool ? { 'mcp-method': 'tools/call', 'mcp-name': tool } : {} }, 'http');
    const before = cacheLimits().maxEntries;
    try {
      setCacheLimits({ maxEntries: 3 });
      for (let i = 0; i < 4; i++) expect(await decide(up(i))).toMatchObject({ allow: true, cached: false });
      // The newest three are cached; the first was dropped and is looked up again.
      for (let i = 1; i < 4; i++) expect(await decide(up(i))).toMatchObject({ cached: true });
      expect(await decide(up(0))).toMatchObject({ cached: false });
      expect(assessed.get(up(0))).toBe(2);
      expect([1, 2, 3].map((i) => assessed.get(up(i)))).toEqual([1, 1, 1]);

      for (let i = 0; i < 4; i++) expect(await decide(up(0), `tool_${i}`)).toMatchObject({ allow: true, toolName: `tool_${i}` });
      for (let i = 1; i < 4; i++) await decide(up(0), `tool_${i}`);
      expect([1, 2, 3].map((i) => toolReads.get(`tool_${i}`))).toEqual([1, 1, 1]);
      await decide(up(0), 'tool_0');
      expect(toolReads.get('tool_0')).toBe(2);
    } finally {
      setCacheLimits({ maxEntries: before });
    }
  });
});

describe('the JSON text of a decision', () => {
  it('is the body serialized, kept per receipt around decided_at, whatever the tool names hold', async () => {
    let at = new Date('2026-11-25T12:00:00.000Z');
    // Receipts shared per claim, as pre-flight shares them: one id per claim key.
    const ids = new Map<string, string>();
    const source: GateVerdictSource = {
      async assess(upstream) {
        return { verdict: upstream.includes('fail') ? 'FAIL' : 'PASS', trustScore: upstream.includes('fail') ? 12.5 : 80, serverId: 1 } satisfies GateAssessment;
      },
      async tool(_a, tool) {
        return tool.includes('drift')
          ? { drift: { toolName: tool, change: 'changed', detectedAt: new Date(at.getTime() - 1000), receiptId: 'r' } as never, evidence: { verdict: 'UNRATED', trustScore: null, reports: 0 } }
          : { drift: null, evidence: { verdict: 'PASS', trustScore: 90, reports: 40 } };
      },
      async record(_u, _a, _c, key) {
        if (!ids.has(key)) ids.set(key, (ids.size + 1).toString(16).padStart(16, '0'));
        return { receiptId: ids.get(key)!, jws: 'jws' };
      },
    };
    const gateService = createGateService({ config: loadConfig({}), now: () => at }, source);
    const tools = ['search', 'say "hi"', '"decided_at":"', 'drift_tool', 'ünïcode\u2028', '\\'];
    const upstreams = ['https://a.example.com/mcp', 'https://fail.example.com/mcp'];
    const seen = new Map<string, string>();
    for (let round = 0; round < 2; round++) {
      for (const u of upstreams) {
        for (const tool of [undefined, ...tools]) {
          const o = await gateService.decide({ gatewayHeaders: { 'x-mcp-server': u }, mcpHeaders: tool ? { 'mcp-method': 'tools/call', 'mcp-name': tool } : {} }, 'http');
          const text = gateService.bodyText(o);
          expect(text).toBe(JSON.stringify(gateService.body(o)));
          expect(JSON.parse(text)).toMatchObject({ decided_at: at.toISOString(), receipt_id: o.receiptId });
          // The same receipt a moment later: the same text but for decided_at.
          if (seen.has(o.receiptId!)) expect(text.replace(/"decided_at":"[^"]*"/, '')).toBe(seen.get(o.receiptId!));
          seen.set(o.receiptId!, text.replace(/"decided_at":"[^"]*"/, ''));
        }
      }
      at = new Date(at.getTime() + 250);
    }
    expect(seen.size).toBeGreaterThan(4);
  });
});
