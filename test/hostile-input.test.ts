import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { PENDING } from '../src/http/routes/pending.js';
import { MCP_TOOL_NAMES } from '../src/agents/mcp-tool-names.js';
import { postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { installLoopbackGuard } from './support/loopback-guard.js';
import { rawExchange } from './support/connections.js';

// Hostile input (issue 11 item 3): property-based requests against every REST operation listed in
// /openapi.json of the started app (so routes that land later are covered without editing this
// file) and both JSON-RPC endpoints. The service must never answer 5xx other than a documented
// 501 (pending routes) or 502 (an upstream the operation documents), every REST error must be
// problem+json, and it must keep answering (/healthz after each property).

const RUNS = Number(process.env.FUZZ_RUNS ?? 25);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
console.log(`hostile-input: fast-check seed ${SEED}, ${RUNS} runs per property (FUZZ_SEED / FUZZ_RUNS to replay)`);

let t: TestApp;
let restoreNetwork: () => void;
type Op = { method: string; path: string; params: { in: string; name: string }[]; body: boolean; allowed: Set<number> };
let ops: Op[] = [];
const failures: string[] = [];

const TRACKED = 'https://fuzz-tracked.example.com/mcp';
const HTML = '<script>alert(1)</script>';

// Values an attacker (or a broken client) sends; the fuzzer mixes them with random strings.
const ADVERSARIAL = [
  '',
  ' ',
  '0',
  '-1',
  '1e309',
  'NaN',
  'Infinity',
  '-Infinity',
  'null',
  'undefined',
  'true',
  '[]',
  '{}',
  "' OR '1'='1",
  "'; DROP TABLE servers; --",
  '1; SELECT pg_sleep(10)',
  '%00',
  '\u0000',
  '\uD800',
  '\uFFFF',
  '𝕏🦄\u202E\u200B',
  'e\u0301\u0301\u0301',
  HTML,
  '"><img src=x onerror=alert(1)>',
  '../../../../etc/passwd',
  '..%2F..%2F..%2Fetc%2Fpasswd',
  '/etc/passwd',
  'file:///etc/passwd',
  'javascript:alert(1)',
  'data:text/html,<b>x</b>',
  'http://127.0.0.1:1/mcp',
  'http://[::1]:1/mcp',
  'http://localhost:1/mcp',
  'https://fuzz-tracked.example.com/mcp',
  'fuzz-tracked-example-com-mcp',
  'http://user:pass@127.0.0.1:1/x?y=1#z',
  'x'.repeat(5000),
  'é'.repeat(3000),
  '%'.repeat(300),
  '\r\nX-Injected: 1',
  '${jndi:ldap://127.0.0.1:1/a}',
  '{{7*7}}',
  'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.',
  'a.b.c',
];

const hostileString = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...ADVERSARIAL) },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.integer().map(String) },
  { weight: 1, arbitrary: fc.double().map(String) },
);

const hostileJson: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: hostileString },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.constantFrom(-1, 0, 2 ** 53 + 1, -(2 ** 63), 1e308, 5e-324, true, false, null) },
  { weight: 1, arbitrary: fc.array(hostileString, { maxLength: 5 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(hostileString, hostileString, { maxKeys: 5 }) },
);

/** Raw JSON-ish body texts: deep nesting, NaN/Infinity (not JSON), prototype pollution, truncation. */
const RAW_BODIES = [
  '[' .repeat(20_000) + ']'.repeat(20_000),
  '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000),
  '{"latency_ms": NaN, "success": true, "server_url": "https://a.example.com"}',
  '{"latency_ms": Infinity}',
  '{"latency_ms": 1e999, "success": true, "server_url": "https://fuzz-tracked.example.com/mcp"}',
  '{"__proto__": {"polluted": true}, "constructor": {"prototype": {"x": 1}}}',
  '{"server_url": "https://a.example.com", "success": true, "latency_ms": 5',
  '\u0000\u0001\u0002',
  '\uFEFF{}',
  'null',
  '"just a string"',
  '12',
  '[]',
  '',
];

/** Percent-encodes UTF-8 (lone surrogates become U+FFFD; encodeURIComponent would throw). */
const pct = (s: string) => Array.from(new TextEncoder().encode(s), (b) => (/[A-Za-z0-9\-_.~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`)).join('');
/** Already-encoded sequences that are not valid UTF-8 or not valid escapes, sent verbatim. */
const RAW_ESCAPES = ['%FF', '%ED%A0%80', '%C0%AF', '%', '%zz', '%E2%82', '%00'];

function problemLike(res: Response, text: string): boolean {
  if ((res.headers.get('content-type') ?? '').startsWith('application/problem+json')) {
    try {
      const b = JSON.parse(text);
      return typeof b.code === 'string' && b.status === res.status;
    } catch {
      return false;
    }
  }
  return false;
}

/** Records a violation; returns true when the answer is acceptable. */
async function check(what: string, res: Response, allowed: Set<number>, rest = true): Promise<boolean> {
  const text = await res.text();
  let ok = res.status < 500 || allowed.has(res.status);
  if (ok && rest && res.status >= 400 && res.status !== 405 && !problemLike(res, text)) ok = res.status === 400 && text === ''; // node's parser may reject before fastify
  if (ok && /text\/html|image\/svg/.test(res.headers.get('content-type') ?? '') && /<script>alert|<img src=x/i.test(text)) ok = false;
  if (!ok) {
    failures.push(`${what} -> ${res.status} ${text.slice(0, 300)}`);
    console.error(`hostile-input violation: ${failures[failures.length - 1]}`);
  }
  return ok;
}

// A hang is a failure, but a slow answer on a loaded machine is not: the bound is far above the
// slowest request measured (well under a second), so only a request that never ends trips it.
const send = (url: string, init: RequestInit = {}) => fetch(url, { ...init, signal: AbortSignal.timeout(90_000) });
async function healthy() {
  const r = await send(`${t.base}/healthz`);
  await r.arrayBuffer();
  return r.status === 200;
}

beforeAll(async () => {
  restoreNetwork = installLoopbackGuard();
  t = await startTestApp({
    // Every outbound dependency points at a closed loopback port: unreachable upstreams.
    CLAWHUB_API_URL: 'http://127.0.0.1:1/api/v1',
    PAYMENT_RPC_URL: 'http://127.0.0.1:1',
    ALLOW_PRIVATE_TARGETS: '1',
    RATE_LIMIT_PROBES_PER_MINUTE: '0',
    RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0',
    // Every request must reach its handler, not a 429.
    RATE_LIMIT_GATE_PER_MINUTE: '0',
    RATE_LIMIT_MCP_PREFLIGHT_PER_MINUTE: '0',
    RATE_LIMIT_A2A_SKILLS_PER_MINUTE: '0',
  });
  const r = await postJson(`${t.base}/api/report`, { server_url: TRACKED, success: true, latency_ms: 12, tool_name: HTML });
  expect(r.status).toBe(200);
  const oa = (await (await fetch(`${t.base}/openapi.json`)).json()) as { paths: Record<string, unknown> };
  const pending = new Set(PENDING.map(([m, u]) => `${m} ${u}`));
  for (const [path, item] of Object.entries(oa.paths as Record<string, Record<string, { parameters?: { in: string; name: string }[]; requestBody?: unknown; responses?: Record<string, unknown> }>>)) {
    for (const [m, op] of Object.entries(item)) {
      const method = m.toUpperCase();
      const allowed = new Set<number>();
      if (op.responses?.['502']) allowed.add(502);
      if (op.responses?.['504']) allowed.add(504);
      if (pending.has(`${method} ${path}`)) allowed.add(501);
      ops.push({ method, path, params: op.parameters ?? [], body: op.requestBody !== undefined, allowed });
    }
  }
}, 120_000);

afterAll(async () => {
  await t?.close();
  restoreNetwork?.();
});

const fill = (op: Op, pathValues: Record<string, string>) =>
  op.path.replace(/\{([^}]+)\}/g, (_, name: string) => pathValues[name] ?? 'x');

describe(`hostile input (${backend})`, () => {
  beforeEach(() => {
    failures.length = 0;
  });
  it('enumerates the REST operations from /openapi.json', () => {
    expect(ops.length).toBeGreaterThan(20);
    expect(ops.some((o) => o.path === '/api/report' && o.method === 'POST')).toBe(true);
  });

  it('query and path parameters: wrong types, huge, unicode, SQL/HTML fragments, traversal', async () => {
    for (const op of ops.filter((o) => !o.body)) {
      const names = op.params.map((p) => p.name);
      await fc.assert(
        fc.asyncProperty(
          fc.dictionary(fc.constantFrom(...(names.length ? names : ['x']), 'extra', 'url'), hostileString, { maxKeys: 4 }),
          fc.boolean(),
          fc.option(fc.constantFrom(...RAW_ESCAPES)),
          async (values, rawPath, rawEscape) => {
            const pathValues = Object.fromEntries(op.params.filter((p) => p.in === 'path').map((p) => [p.name, values[p.name] ?? 'x']));
            // Either encoded, or raw (traversal segments and all) as a hostile client would send it.
            const enc = rawPath ? (s: string) => s.replace(/[#?\s%]/g, (c) => pct(c)).replace(/[\uD800-\uDFFF]/g, '%ED%A0%80') : pct;
            const path = fill(op, Object.fromEntries(Object.entries(pathValues).map(([k, v]) => [k, enc(v) || 'x'])));
            const qs = Object.entries(values)
              .filter(([k]) => !op.params.some((p) => p.in === 'path' && p.name === k))
              .map(([k, v]) => `${pct(k)}=${pct(v)}${rawEscape ?? ''}`)
              .join('&');
            const res = await send(`${t.base}${path}${qs ? `?${qs}` : ''}`, { method: op.method });
            return check(`${op.method} ${path}?${qs.slice(0, 200)}`, res, op.allowed);
          },
        ),
        { numRuns: RUNS, seed: SEED },
      );
    }
    expect(failures).toEqual([]);
    expect(await healthy()).toBe(true);
  }, 120_000);

  it('JSON bodies: hostile values under the expected and unexpected keys, raw broken JSON, bad content types', async () => {
    const reportKeys = ['server_url', 'success', 'latency_ms', 'tool_name', 'status_code', 'error_type', 'type', 'requested_credential_type', 'prompt', 'arguments'];
    for (const op of ops.filter((o) => o.body && o.path !== '/mcp' && o.path !== '/a2a')) {
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(fc.dictionary(fc.constantFrom(...reportKeys), hostileJson, { maxKeys: 6 }), hostileJson),
          async (body) => check(`${op.method} ${op.path} ${JSON.stringify(body).slice(0, 200)}`, await postJson(`${t.base}${op.path}`, body), op.allowed),
        ),
        { numRuns: RUNS * 2, seed: SEED },
      );
      for (const raw of RAW_BODIES) {
        await check(`${op.path} raw ${raw.slice(0, 40)}`, await send(`${t.base}${op.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: raw }), op.allowed);
      }
      for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json; charset=utf-16', 'application/grpc', '../../etc', '']) {
        await check(`${op.path} content-type ${ct}`, await send(`${t.base}${op.path}`, { method: 'POST', headers: ct ? { 'content-type': ct } : {}, body: '{"a":1}' }), op.allowed);
      }
      await check(`${op.path} oversized`, await send(`${t.base}${op.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ server_url: 'x'.repeat(2_000_000) }) }), op.allowed);
    }
    expect(failures).toEqual([]);
    expect(await healthy()).toBe(true);
  }, 120_000);

  it('random methods on every path', async () => {
    const paths = [...new Set(ops.map((o) => fill(o, {})))];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...paths), fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'PROPFIND', 'FOO'), async (path, method) => {
        const res = await send(`${t.base}${path}`, { method, ...(method === 'POST' || method === 'PUT' || method === 'PATCH' ? { body: '{}', headers: { 'content-type': 'application/json' } } : {}) });
        const op = ops.find((o) => fill(o, {}) === path && o.method === (method === 'HEAD' ? 'GET' : method));
        // HEAD answers have no body to be problem+json in.
        // /mcp and /a2a answer JSON-RPC error objects (the MCP transport's 406 too), not problem+json.
        return check(`${method} ${path}`, res, op?.allowed ?? new Set(), method !== 'HEAD' && method !== 'OPTIONS' && path !== '/mcp' && path !== '/a2a');
      }),
      { numRuns: RUNS * 6, seed: SEED },
    );
    expect(failures).toEqual([]);
    expect(await healthy()).toBe(true);
  }, 120_000);

  it('JSON-RPC on /mcp and /a2a: random methods, ids and params', async () => {
    const mcpMethod = fc.oneof(fc.constantFrom('initialize', 'tools/list', 'tools/call', 'ping', 'resources/list', 'prompts/list', 'notifications/initialized'), hostileString);
    const a2aMethod = fc.oneof(fc.constantFrom('message/send', 'tasks/get', 'tasks/cancel', 'message/stream'), hostileString);
    const toolArgs = fc.dictionary(fc.constantFrom('target', 'url', 'server_url', 'jws', 'receipt_id', 'attestation', 'x'), hostileJson, { maxKeys: 3 });
    const params = fc.oneof(
      hostileJson,
      fc.record({ name: fc.oneof(fc.constantFrom(...MCP_TOOL_NAMES), hostileString), arguments: fc.oneof(toolArgs, hostileJson) }),
      fc.record({ message: fc.record({ role: fc.oneof(fc.constant('user'), hostileString), messageId: hostileString, parts: fc.array(fc.oneof(fc.record({ kind: fc.constant('text'), text: hostileString }), fc.record({ kind: fc.constantFrom('data', 'file', 'x'), data: toolArgs })), { maxLength: 3 }) }) }),
      fc.record({ id: hostileString }),
    );
    const id = fc.oneof(fc.integer(), hostileString, fc.constant(null), hostileJson);
    for (const [path, method] of [
      ['/mcp', mcpMethod],
      ['/a2a', a2aMethod],
    ] as const) {
      await fc.assert(
        fc.asyncProperty(fc.record({ jsonrpc: fc.oneof(fc.constant('2.0'), hostileJson), id, method: fc.oneof(method, hostileJson), params }, { requiredKeys: ['method'] }), fc.boolean(), async (msg, batch) => {
          const res = await send(`${t.base}${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
            body: JSON.stringify(batch ? [msg, msg] : msg),
          });
          return check(`POST ${path} ${JSON.stringify(msg).slice(0, 300)}`, res, new Set(), false);
        }),
        { numRuns: RUNS * 8, seed: SEED },
      );
      for (const raw of RAW_BODIES) {
        await check(`${path} raw ${raw.slice(0, 40)}`, await send(`${t.base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: raw }), new Set(), false);
      }
    }
    expect(failures).toEqual([]);
    expect(await healthy()).toBe(true);
  }, 120_000);

  it('a Host that is no authority, or none at all, on every door: never a 5xx, and the RPC doors answer invalid_argument in their protocol', async () => {
    const port = new URL(t.base).port;
    const hosts = ['a b', '[::1', 'x:notaport', '%00', 'h\u00e9llo.example', 'a/b?c#d', ''];
    const formsUrl = (host: string) => URL.canParse(`http://${host}/`);
    const doors: { method: string; path: string; type?: string; body?: string; rpc?: 'connect' | 'grpc-web' }[] = [
      ...ops.filter((o) => !o.body).map((o) => ({ method: o.method, path: fill(o, {}) })),
      { method: 'POST', path: '/api/report', type: 'application/json', body: JSON.stringify({ server_url: TRACKED, success: true, latency_ms: 1 }) },
      { method: 'POST', path: '/mcp', type: 'application/json', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) },
      { method: 'POST', path: '/a2a', type: 'application/json', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'x' } }) },
      { method: 'POST', path: '/observatory.v1.TrustService/GetTrust', type: 'application/json', body: JSON.stringify({ url: TRACKED }), rpc: 'connect' },
      { method: 'POST', path: '/observatory.v1.TrustService/GetTrust', type: 'application/grpc-web+proto', body: '\u0000\u0000\u0000\u0000\u0000', rpc: 'grpc-web' },
    ];
    for (const host of hosts) {
      for (const d of doors) {
        const head = [`${d.method} ${d.path} HTTP/1.1`, ...(host === '' ? [] : [`Host: ${host}`]), 'Connection: close'];
        if (d.type) head.push(`Content-Type: ${d.type}`, 'Accept: application/json, text/event-stream');
        const body = Buffer.from(d.body ?? '', 'latin1');
        if (d.body !== undefined) head.push(`Content-Length: ${body.length}`);
        const answer = await rawExchange(port, Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
        const what = `${d.method} ${d.path} with Host ${JSON.stringify(host)}`;
        if (!(answer.status > 0 && answer.status < 500)) failures.push(`${what} -> ${answer.status} ${answer.body.slice(0, 200)}`);
        if (!d.rpc) continue;
        // node's parser answers a bare 400 to an HTTP/1.1 request without Host before any door
        // sees it; a Host that forms no URL cannot become a call: invalid_argument, in the
        // protocol of the request; a strange Host that still forms a URL is served as usual.
        const refused = d.rpc === 'connect' ? answer.status === 400 && (host === '' || JSON.parse(answer.body).code === 'invalid_argument') : host === '' ? answer.status === 400 : answer.headers['grpc-status'] === '3';
        if (refused !== (host === '' || !formsUrl(host))) failures.push(`${what} -> ${answer.status} grpc-status ${answer.headers['grpc-status']} ${answer.body.slice(0, 200)}`);
      }
    }
    expect(failures).toEqual([]);
    expect(await healthy()).toBe(true);
  }, 120_000);

  it('echoed HTML is escaped (badge of a server reported with markup in its tool name and URL)', async () => {
    const url = `https://fuzz-html.example.com/${encodeURIComponent(HTML)}`;
    await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 5, tool_name: HTML });
    for (const u of [TRACKED, url, `https://x.example.com/${HTML}`, HTML]) {
      const res = await send(`${t.base}/api/badge?url=${encodeURIComponent(u)}`);
      const body = await res.text();
      expect(res.status).toBeLessThan(500);
      expect(body).not.toMatch(/<script>alert/);
    }
    expect(await healthy()).toBe(true);
  });
});
