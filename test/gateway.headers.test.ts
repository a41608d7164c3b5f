import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { StatusCode } from '../gen/envoy/type/v3/http_status_pb.js';
import { startTestApp, type TestApp } from './support/app.js';
import { rawExchange } from './support/connections.js';
import { seedVerdicts } from './support/seed.js';
import { backend } from './support/db.js';

// Headers the gate decides on carry one value each (docs/gateway.md "One value per header"), and
// a URL built from the request (Host, X-Original-URL, X-Forwarded-*) is judged only through
// GATE_ROUTES when a route table is configured.
//
// Repeated headers: node joins repeated lines ("tools/call, tools/call"; Host keeps the first),
// Envoy's ext_authz Check merges them with "," in `headers` or lists each in `header_map`. A
// joined Mcp-Method read as one value was a valid method other than tools/call, so the per-tool
// checks were skipped while GATE_REQUIRE_MCP_METHOD was satisfied, and an upstream reading the
// first value saw tools/call. Each case sends the repeat on a real connection (a raw socket: two
// header lines) or through the official gRPC client, on the fast path (`GET /v1/gate`) and on
// the fastify route (`/v1/gate/...`).

const PASS = 'https://pass.example.com/mcp';
const FAIL = 'https://fail.example.com/mcp';
const UNCERTAIN = 'https://uncertain.example.com/mcp';

let t: TestApp;
let port: number;

beforeAll(async () => {
  t = await startTestApp({
    GATE_TOOLS_DENY: 'delete_everything',
    GATE_REQUIRE_MCP_METHOD: '1',
    GATE_ROUTES: JSON.stringify([{ host: 'gw.test', path_prefix: '/weather', upstream: PASS }]),
    GATE_TRUSTED_HEADERS: 'x-forwarded-proto,x-forwarded-host,x-original-uri',
  });
  port = Number(new URL(t.base).port);
  await seedVerdicts(t.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

/** A raw HTTP/1.1 request to `path` with these header lines, as written (repeats kept). */
const wire = (path: string, lines: string[]) => rawExchange(port, `GET ${path} HTTP/1.1\r\n${lines.join('\r\n')}\r\nConnection: close\r\n\r\n`);
const body = (a: { body: string }) => JSON.parse(a.body) as Record<string, unknown>;

describe(`/v1/gate: repeated MCP headers are refused (${backend})`, () => {
  const upstream = ['Host: x', `X-Mcp-Server: ${PASS}`];
  const repeats: [string, string[]][] = [
    ['Mcp-Method twice (tools/call)', ['Mcp-Method: tools/call', 'Mcp-Method: tools/call', 'Mcp-Name: delete_everything']],
    ['Mcp-Method twice (tools/list, tools/call)', ['Mcp-Method: tools/list', 'Mcp-Method: tools/call', 'Mcp-Name: delete_everything']],
    ['Mcp-Name twice', ['Mcp-Method: tools/call', 'Mcp-Name: delete_everything', 'Mcp-Name: get_forecast']],
    ['Mcp-Name twice, the same', ['Mcp-Method: tools/call', 'Mcp-Name: delete_everything', 'Mcp-Name: delete_everything']],
    ['Mcp-Method as a list on one line', ['Mcp-Method: tools/call, tools/call', 'Mcp-Name: delete_everything']],
  ];

  it('the single header lines are decided as before: the denied tool is denied, another tool allowed', async () => {
    const denied = await wire('/v1/gate', [...upstream, 'Mcp-Method: tools/call', 'Mcp-Name: delete_everything']);
    expect(denied.status).toBe(403);
    expect(body(denied)).toMatchObject({ reason: 'policy_denies_tool' });
    const allowed = await wire('/v1/gate', [...upstream, 'Mcp-Method: tools/call', 'Mcp-Name: get_forecast']);
    expect(allowed.status).toBe(200);
  });

  for (const path of ['/v1/gate', '/v1/gate/weather/mcp']) {
    it(`denies repeated Mcp-Method / Mcp-Name with 403 mcp_headers_invalid on ${path}`, async () => {
      const before = t.obs.fastPathAnswers();
      for (const [what, lines] of repeats) {
        const res = await wire(path, [...upstream, ...lines]);
        expect(res.status, what).toBe(403);
        expect(body(res), what).toMatchObject({ allow: false, reason: 'mcp_headers_invalid', upstream: PASS, verdict: 'PASS', tool: null });
        expect(res.headers['x-trust-verdict'], what).toBe('PASS');
        expect(res.headers['x-trust-receipt'], what).toMatch(/^[0-9a-f]{16}$/);
        expect(String(body(res).detail), what).toMatch(/more than once|one value/);
      }
      // Denials are fastify's to write: the fast path answered none of them.
      expect(t.obs.fastPathAnswers()).toBe(before);
    });
  }
});

describe(`/v1/gate: repeated upstream headers are refused (${backend})`, () => {
  const cases: [string, string, string[]][] = [
    ['X-Mcp-Server twice', '/v1/gate', ['Host: x', `X-Mcp-Server: ${FAIL}`, `X-Mcp-Server: ${PASS}`]],
    ['X-Original-URL twice', '/v1/gate', ['Host: x', `X-Original-URL: ${PASS}`, `X-Original-URL: ${FAIL}`]],
    ['X-Forwarded-Host twice', '/v1/gate', ['Host: x', 'X-Forwarded-Proto: https', 'X-Forwarded-Host: pass.example.com', 'X-Forwarded-Host: fail.example.com', 'X-Original-URI: /mcp']],
    ['X-Forwarded-Proto twice', '/v1/gate', ['Host: x', 'X-Forwarded-Proto: https', 'X-Forwarded-Proto: http', 'X-Forwarded-Host: pass.example.com', 'X-Original-URI: /mcp']],
    ['X-Original-URI twice', '/v1/gate', ['Host: x', 'X-Forwarded-Proto: https', 'X-Forwarded-Host: pass.example.com', 'X-Original-URI: /mcp', 'X-Original-URI: /other']],
    // node keeps the first Host and drops the second: the route matched gw.test.
    ['Host twice', '/v1/gate/weather/mcp', ['Host: gw.test', 'Host: fail.example.com']],
  ];
  for (const [what, path, lines] of cases) {
    it(`answers 400 invalid_argument for ${what}`, async () => {
      const res = await wire(path, [...lines, 'Mcp-Method: tools/list']);
      expect(res.status, res.body).toBe(400);
      expect(body(res)).toMatchObject({ code: 'invalid_argument' });
      expect(String(body(res).detail)).toMatch(/more than once/);
    });
  }

  it('answers 400 for an X-Forwarded-Host or X-Forwarded-Proto list on one line (no entry is taken)', async () => {
    for (const lines of [
      ['X-Forwarded-Proto: https', 'X-Forwarded-Host: pass.example.com, fail.example.com', 'X-Original-URI: /mcp'],
      ['X-Forwarded-Proto: https,http', 'X-Forwarded-Host: pass.example.com', 'X-Original-URI: /mcp'],
    ]) {
      const res = await wire('/v1/gate', ['Host: x', ...lines, 'Mcp-Method: tools/list']);
      expect(res.status, lines.join(' | ')).toBe(400);
      expect(String(body(res).detail)).toMatch(/one value/);
    }
  });
});

describe(`/v1/gate with GATE_ROUTES: a request URL no route matches is not judged as itself (${backend})`, () => {
  it('refuses X-Original-URL / X-Forwarded-* naming a host no route lists, where before it judged that URL (UNCERTAIN: allowed)', async () => {
    for (const lines of [
      [`X-Original-URL: ${UNCERTAIN}`],
      ['X-Forwarded-Proto: https', 'X-Forwarded-Host: uncertain.example.com', 'X-Original-URI: /mcp'],
    ]) {
      for (const path of ['/v1/gate', '/v1/gate/x']) {
        const res = await wire(path, ['Host: x', ...lines, 'Mcp-Method: tools/list']);
        expect(res.status, `${path} ${lines.join(' | ')}`).toBe(400);
        expect(String(body(res).detail)).toMatch(/GATE_ROUTES/);
      }
    }
  });

  it('still maps a routed URL and still takes X-Mcp-Server as given', async () => {
    const routed = await wire('/v1/gate', ['Host: x', 'X-Original-URL: https://gw.test/weather/mcp', 'Mcp-Method: tools/list']);
    expect(routed.status).toBe(200);
    expect(body(routed)).toMatchObject({ upstream: PASS, upstream_source: 'route' });
    const viaHost = await wire('/v1/gate/weather/mcp', ['Host: gw.test', 'Mcp-Method: tools/list']);
    expect(viaHost.status).toBe(200);
    expect(body(viaHost)).toMatchObject({ upstream: PASS, upstream_source: 'route' });
    const explicit = await wire('/v1/gate', ['Host: x', `X-Mcp-Server: ${UNCERTAIN}`, 'Mcp-Method: tools/list']);
    expect(explicit.status).toBe(200);
    expect(body(explicit)).toMatchObject({ upstream: UNCERTAIN, upstream_source: 'x-mcp-server' });
  });
});

describe(`ext_authz Check: repeated headers (${backend})`, () => {
  const client = () => createClient(Authorization, createGrpcTransport({ baseUrl: t.base }));
  const enc = (s: string) => new TextEncoder().encode(s);
  const withMap = (headers: Record<string, string>) =>
    client().check({
      attributes: { request: { http: { method: 'POST', headers, host: 'gw.example', path: '/mcp', scheme: 'https' } }, contextExtensions: { mcp_server: PASS } },
    });
  const withList = (headers: [string, string][]) =>
    client().check({
      attributes: {
        request: { http: { headerMap: { headers: headers.map(([key, v]) => ({ key, rawValue: enc(v) })) }, host: 'gw.example', path: '/mcp', scheme: 'https' } },
        contextExtensions: { mcp_server: PASS },
      },
    });
  const expectInvalid = (res: Awaited<ReturnType<typeof withMap>>, what: string) => {
    expect(res.status?.code, what).toBe(7);
    expect(res.dynamicMetadata, what).toMatchObject({ decision: 'deny', reason: 'mcp_headers_invalid', trust_verdict: 'PASS' });
    if (res.httpResponse.case !== 'deniedResponse') throw new Error(`${what}: expected a denied response`);
    expect(res.httpResponse.value.status?.code).toBe(StatusCode.Forbidden);
  };

  it('decides single values as before', async () => {
    expect((await withMap({ 'mcp-method': 'tools/call', 'mcp-name': 'delete_everything' })).dynamicMetadata).toMatchObject({ reason: 'policy_denies_tool' });
    expect((await withMap({ 'mcp-method': 'tools/call', 'mcp-name': 'get_forecast' })).status?.code).toBe(0);
    expect((await withList([['Mcp-Method', 'tools/call'], ['Mcp-Name', 'get_forecast']])).status?.code).toBe(0);
  });

  it('denies merged values in the headers map (Envoy joins repeats with ",") with mcp_headers_invalid', async () => {
    for (const headers of [
      { 'mcp-method': 'tools/call,tools/call', 'mcp-name': 'delete_everything' },
      { 'mcp-method': 'tools/list,tools/call', 'mcp-name': 'delete_everything' },
      { 'mcp-method': 'tools/call', 'mcp-name': 'delete_everything,get_forecast' },
    ]) {
      expectInvalid(await withMap(headers), JSON.stringify(headers));
    }
  });

  it('denies a name listed twice in header_map (encode_raw_headers) with mcp_headers_invalid', async () => {
    for (const list of [
      [['Mcp-Method', 'tools/list'], ['Mcp-Method', 'tools/call'], ['Mcp-Name', 'delete_everything']],
      [['mcp-method', 'tools/call'], ['Mcp-Name', 'get_forecast'], ['MCP-NAME', 'delete_everything']],
    ] as [string, string][][]) {
      expectInvalid(await withList(list), JSON.stringify(list));
    }
  });

  it('answers 400 for repeated gateway-set upstream headers (GATE_TRUSTED_HEADERS), merged or listed', async () => {
    const fwd = { 'x-forwarded-proto': 'https', 'x-original-uri': '/mcp' };
    for (const res of [
      await client().check({ attributes: { request: { http: { headers: { ...fwd, 'x-forwarded-host': 'pass.example.com,fail.example.com' }, host: 'gw.example', path: '/mcp' } } } }),
      await client().check({ attributes: { request: { http: { headers: { ...fwd, 'x-forwarded-proto': 'https,http', 'x-forwarded-host': 'pass.example.com' }, host: 'gw.example', path: '/mcp' } } } }),
      await client().check({ attributes: { request: { http: { headers: { ...fwd, 'x-forwarded-host': 'pass.example.com', 'x-original-uri': '/mcp,/other' }, host: 'gw.example', path: '/mcp' } } } }),
    ]) {
      expect(res.status?.code).toBe(3);
      if (res.httpResponse.case !== 'deniedResponse') throw new Error('expected a denied response');
      expect(res.httpResponse.value.status?.code).toBe(StatusCode.BadRequest);
    }
    // header_map without a context extension (withList names one, which would win).
    const listed = await client().check({
      attributes: {
        request: {
          http: {
            headerMap: { headers: [['X-Forwarded-Proto', 'https'], ['X-Forwarded-Host', 'pass.example.com'], ['x-forwarded-host', 'fail.example.com'], ['X-Original-URI', '/mcp']].map(([key, v]) => ({ key: key!, rawValue: enc(v!) })) },
            host: 'gw.example',
            path: '/mcp',
          },
        },
      },
    });
    expect(listed.status?.code).toBe(3);
    expect(listed.status?.message).toMatch(/more than once/);
    // A query with a comma is not a repeat: only the part before `?` could be two values.
    const query = await client().check({
      attributes: { request: { http: { headers: { ...fwd, 'x-forwarded-host': 'gw.test', 'x-original-uri': '/weather/mcp?fields=a,b', 'mcp-method': 'tools/list' }, host: 'gw.example', path: '/mcp' } } },
    });
    expect(query.status?.code).toBe(0);
    expect(query.dynamicMetadata).toMatchObject({ upstream: PASS, decision: 'allow' });
  });
});

describe(`ext_authz Check with GATE_ROUTES: a request no route matches is not judged as itself (${backend})`, () => {
  const client = () => createClient(Authorization, createGrpcTransport({ baseUrl: t.base }));
  it('answers 400 for a host no route lists (the client chose it), where before its URL was judged (UNCERTAIN: allowed)', async () => {
    const res = await client().check({ attributes: { request: { http: { headers: { 'mcp-method': 'tools/list' }, host: 'uncertain.example.com', path: '/mcp', scheme: 'https' } } } });
    expect(res.status?.code).toBe(3);
    if (res.httpResponse.case !== 'deniedResponse') throw new Error('expected a denied response');
    expect(res.httpResponse.value.status?.code).toBe(StatusCode.BadRequest);
    expect(res.status?.message).toMatch(/GATE_ROUTES/);
    const routed = await client().check({ attributes: { request: { http: { headers: { 'mcp-method': 'tools/list' }, host: 'gw.test', path: '/weather/mcp', scheme: 'https' } } } });
    expect(routed.status?.code).toBe(0);
    expect(routed.dynamicMetadata).toMatchObject({ upstream: PASS });
  });
});
