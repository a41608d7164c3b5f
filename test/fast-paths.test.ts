import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { rawExchange } from './support/connections.js';
import Fastify from 'fastify';
import { fastPaths } from '../src/http/fast-paths.js';
import { clientAddressOf, fastifyTrustProxy } from '../src/http/client-address.js';
import type { Config } from '../src/config.js';

// Cached trust reads and allowed gate decisions answered before fastify's lifecycle
// (src/http/fast-paths.ts, issue 22): the same answer as the fastify route, byte for byte, and
// every request a fast path does not take reaches fastify as before. A query ending in `&` (a
// bare `?` on the gate) parses the same in fastify but is not taken by a fast path: the two
// paths side by side.

let t: TestApp;
const server = 'https://fast.example.com/mcp';
const path = `/api/trust?url=${encodeURIComponent(server)}`;

beforeAll(async () => {
  t = await startTestApp();
  expect((await postJson(`${t.base}/api/report`, { server_url: server, success: true, latency_ms: 12, tool_name: 'search' })).status).toBe(200);
  // The score is computed once and then cached (SCORE_CACHE_MS): both paths read the same answer.
  expect((await fetch(`${t.base}${path}&`)).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await t?.close();
});

/** Counts the calls of one service method until restored. */
function countCalls<T extends object, K extends keyof T>(service: T, name: K): { calls: number; restore(): void } {
  const original = service[name] as unknown as (...a: unknown[]) => unknown;
  const counter = {
    calls: 0,
    restore: () => {
      service[name] = original as T[K];
    },
  };
  service[name] = ((...a: unknown[]) => {
    counter.calls++;
    return original.apply(service, a);
  }) as T[K];
  return counter;
}

/** Status, headers (without the per-request id and date) and body of one answer. */
async function answer(p: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.base}${p}`, { headers });
  const h = Object.fromEntries([...res.headers].filter(([k]) => k !== 'x-request-id' && k !== 'date'));
  return { status: res.status, headers: h, names: [...res.headers.keys()], id: res.headers.get('x-request-id'), body: await res.text() };
}

describe(`the fast path for cached trust reads (${backend})`, () => {
  it('answers exactly what the fastify route answers: status, headers, body', async () => {
    const before = t.obs.fastPathAnswers();
    const [fast, slow] = [await answer(path), await answer(`${path}&`)];
    expect(t.obs.fastPathAnswers()).toBe(before + 1);
    expect(fast.status).toBe(200);
    expect(fast).toMatchObject({ status: slow.status, headers: slow.headers, body: slow.body });
    expect(fast.names).toEqual(slow.names);
    expect(JSON.parse(fast.body)).toMatchObject({ server: { url: server } });
    expect(fast.id).toMatch(/^[0-9a-f-]{36}$/);
    // On the wire too: the same header lines in the same order.
    const port = new URL(t.base).port;
    const wire = async (p: string) => (await rawExchange(port, `GET ${p} HTTP/1.1\r\nHost: x\r\nX-Request-Id: same-id\r\nConnection: close\r\n\r\n`));
    const [a, b] = [await wire(path), await wire(`${path}&`)];
    delete a.headers.date;
    delete b.headers.date;
    expect(a).toEqual(b);
    expect(a.headers['x-request-id']).toBe('same-id');
  });

  it('counts its answers in the route metrics', async () => {
    const count = async () => {
      const text = await (await fetch(`${t.base}/metrics`)).text();
      return Number(/observatory_http_requests_total\{method="GET",route="\/api\/trust",status="200"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    const before = await count();
    const answered = t.obs.fastPathAnswers();
    for (let i = 0; i < 3; i++) expect((await fetch(`${t.base}${path}`)).status).toBe(200);
    expect(t.obs.fastPathAnswers()).toBe(answered + 3);
    expect(await count()).toBe(before + 3);
  });

  it('asks the service once per read, also when it refuses (the refusal goes to fastify with the request)', async () => {
    const counted = countCalls(t.obs.services.trust, 'getTrust');
    try {
      await expectProblem(await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://nobody.example.com/mcp')}`), 404, 'not_tracked');
      expect(counted.calls).toBe(1);
      await expectProblem(await fetch(`${t.base}/api/trust?url=ftp%3A%2F%2Fx`), 400, 'invalid_argument');
      expect(counted.calls).toBe(2);
      expect((await fetch(`${t.base}${path}`)).status).toBe(200);
      expect(counted.calls).toBe(3);
    } finally {
      counted.restore();
    }
  });

  it('leaves every other request to fastify, unchanged', async () => {
    const before = t.obs.fastPathAnswers();
    // A browser's request: the CORS headers come from fastify.
    const cors = await fetch(`${t.base}${path}`, { headers: { origin: 'https://app.example' } });
    expect(cors.status).toBe(200);
    expect(cors.headers.get('access-control-allow-origin')).toBe('*');
    // Refusals: problem+json from fastify (the fast path asked the service and stepped aside).
    await expectProblem(await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://untracked.example.com/mcp')}`), 404, 'not_tracked');
    await expectProblem(await fetch(`${t.base}/api/trust?url=`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/trust`), 400, 'invalid_argument');
    // Values fastify's query parser reads its own way (a bad escape, a lone surrogate, a plus sign,
    // a repeated name): answered as fastify answers them.
    for (const q of ['url=%ZZ', 'url=%ED%A0%80', 'url=https://fast.example.com/mcp+x', `url=${encodeURIComponent(server)}&url=${encodeURIComponent(server)}`, 'url=a=b']) {
      const [direct, viaFastify] = [await answer(`/api/trust?${q}`), await answer(`/api/trust?${q}&`)];
      expect(direct.status, q).toBe(viaFastify.status);
      expect(direct.status, q).toBeGreaterThanOrEqual(400);
    }
    // Another method, another path spelling, a body.
    const head = await fetch(`${t.base}${path}`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    expect((await fetch(`${t.base}/api/trust/?url=${encodeURIComponent(server)}`)).status).toBe(404);
    const port = new URL(t.base).port;
    const withBody = await rawExchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    expect(withBody.status).toBe(200);
    expect(t.obs.fastPathAnswers()).toBe(before);
  });
});

/**
 * An answer with what differs from call to call made equal: the time of the decision, the
 * rate-limit bucket's level, and the gate's receipt (shared for a second: two calls on a loaded
 * machine may fall in two).
 */
function sameShape(a: { headers: Record<string, string>; body: string }) {
  const headers = { ...a.headers };
  delete headers.date;
  if (headers.ratelimit) headers.ratelimit = headers.ratelimit.replace(/;r=\d+/, ';r=N');
  if (headers['x-trust-receipt']) headers['x-trust-receipt'] = headers['x-trust-receipt'].replace(/^[0-9a-f]{16}$/, 'R');
  const body = a.body.replace(/"decided_at":"[^"]+"/, '"decided_at":"T"').replace(/[0-9a-f]{16}"/g, 'R"');
  return { headers, names: Object.keys(headers), body };
}

describe(`the fast path for gate decisions (${backend})`, () => {
  const gate = (p: string, headers: Record<string, string> = {}) => answer(p, { 'x-mcp-server': server, ...headers });

  it('answers an allowed decision exactly as the fastify route does: status, header lines, body', async () => {
    // The verdict cached first, so both decisions state the same claim (cached_verdict: true).
    expect((await gate('/v1/gate?via=fastify')).status).toBe(200);
    const before = t.obs.fastPathAnswers();
    const [fast, slow] = [await gate('/v1/gate'), await gate('/v1/gate?via=fastify')];
    expect(t.obs.fastPathAnswers()).toBe(before + 1);
    expect(fast.status).toBe(200);
    expect(slow.status).toBe(200);
    expect(sameShape(fast)).toEqual(sameShape(slow));
    expect(fast.names).toEqual(slow.names);
    expect(fast.headers['x-trust-receipt']).toMatch(/^[0-9a-f]{16}$/);
    expect(fast.headers.ratelimit).toMatch(/^"gate";r=\d+;t=\d+$/);
    expect(JSON.parse(fast.body)).toMatchObject({ allow: true, upstream: server, upstream_source: 'x-mcp-server', cached_verdict: true });
    // The receipt it names resolves (stored before the answer).
    expect((await fetch(`${t.base}/v1/receipt/${fast.headers['x-trust-receipt']}`)).status).toBe(200);
    // On the wire: the same header lines in the same order.
    const port = new URL(t.base).port;
    const wire = async (p: string) => rawExchange(port, `GET ${p} HTTP/1.1\r\nHost: x\r\nX-Mcp-Server: ${server}\r\nX-Request-Id: same-id\r\nConnection: close\r\n\r\n`);
    const [a, b] = [await wire('/v1/gate'), await wire('/v1/gate?via=fastify')];
    expect(a.status).toBe(200);
    expect(sameShape(a)).toEqual(sameShape(b));
    expect(a.headers['x-request-id']).toBe('same-id');
  });

  it('hands denials and refusals to fastify with the decision: one decision per request', async () => {
    const counted = countCalls(t.obs.services.gate, 'decide');
    try {
      const before = t.obs.fastPathAnswers();
      const allowed = await gate('/v1/gate');
      // A denial (an unrated upstream, GATE_ALLOW_UNRATED off): 403 problem+json from fastify's route.
      const denied = await fetch(`${t.base}/v1/gate`, { headers: { 'x-mcp-server': 'https://unrated.example.com/mcp' } });
      const problem = await expectProblem(denied.clone(), 403, 'forbidden');
      expect(problem).toMatchObject({ allow: false, reason: 'policy_denies_unrated', upstream: 'https://unrated.example.com/mcp' });
      expect(denied.headers.get('x-trust-verdict')).toBe('UNRATED');
      expect(denied.headers.get('x-trust-receipt')).toMatch(/^[0-9a-f]{16}$/);
      expect(denied.headers.get('cache-control')).toBe('no-store');
      expect(allowed.status).toBe(200);
      expect(counted.calls).toBe(2);
      // No upstream: 400 from fastify, the service asked once.
      await expectProblem(await fetch(`${t.base}/v1/gate`), 400, 'invalid_argument');
      expect(counted.calls).toBe(3);
      expect(t.obs.fastPathAnswers()).toBe(before + 1);
    } finally {
      counted.restore();
    }
  });

  it('leaves every other gate request to fastify, unchanged', async () => {
    const before = t.obs.fastPathAnswers();
    // Paths below /v1/gate (Envoy's HTTP ext_authz), other methods, a body, a browser.
    expect((await gate('/v1/gate/mcp')).status).toBe(200);
    expect((await fetch(`${t.base}/v1/gate`, { method: 'POST', headers: { 'x-mcp-server': server }, body: 'ignored' })).status).toBe(200);
    expect((await fetch(`${t.base}/v1/gate`, { method: 'HEAD', headers: { 'x-mcp-server': server } })).status).toBe(200);
    const cors = await gate('/v1/gate', { origin: 'https://app.example' });
    expect(cors.status).toBe(200);
    expect(cors.headers['access-control-allow-origin']).toBe('*');
    expect(t.obs.fastPathAnswers()).toBe(before);
  });
});

describe(`the fast path for pre-flight checks (${backend})`, () => {
  const check = `/v1/preflight?target=${encodeURIComponent(server)}`;
  /** What may differ between two checks of one claim: its receipt, when the second came in another second. */
  const claimFree = (a: { headers: Record<string, string>; body: string }) => {
    const shape = sameShape(a);
    const body = JSON.parse(shape.body) as Record<string, unknown>;
    for (const k of ['diligence_receipt', 'receipt_id', 'checked_at']) expect(body[k], k).toBeTruthy();
    delete body.diligence_receipt;
    delete body.receipt_id;
    delete body.checked_at;
    return { ...shape, body };
  };

  it('answers exactly as the fastify route does: status, header lines, body', async () => {
    const before = t.obs.fastPathAnswers();
    const [fast, slow] = [await answer(check), await answer(`${check}&`)];
    expect(t.obs.fastPathAnswers()).toBe(before + 1);
    expect(fast.status).toBe(200);
    expect(claimFree(fast)).toEqual(claimFree(slow));
    expect(fast.names).toEqual(slow.names);
    expect(fast.headers['cache-control']).toBe('no-store');
    expect(fast.headers.ratelimit).toMatch(/^"preflight";r=\d+;t=\d+$/);
    const body = JSON.parse(fast.body) as { receipt_id: string; target: string };
    expect(body.target).toBe(server);
    expect((await fetch(`${t.base}/v1/receipt/${body.receipt_id}`)).status).toBe(200);
    const port = new URL(t.base).port;
    const wire = async (p: string) => rawExchange(port, `GET ${p} HTTP/1.1\r\nHost: x\r\nX-Request-Id: same-id\r\nConnection: close\r\n\r\n`);
    const [a, b] = [await wire(check), await wire(`${check}&`)];
    expect(a.status).toBe(200);
    expect(claimFree(a)).toEqual(claimFree(b));
  });

  it('hands a refusal to fastify: one service call per check', async () => {
    const counted = countCalls(t.obs.services.preflight, 'preflight');
    try {
      expect((await fetch(`${t.base}${check}`)).status).toBe(200);
      await expectProblem(await fetch(`${t.base}/v1/preflight?target=`), 400, 'invalid_argument');
      expect(counted.calls).toBe(2);
    } finally {
      counted.restore();
    }
  });
});

describe(`the fast paths and their rate limits (${backend})`, () => {
  let limited: TestApp;
  beforeAll(async () => {
    // Behind one trusted proxy: the client is the address X-Forwarded-For names.
    limited = await startTestApp({ RATE_LIMIT_GATE_PER_MINUTE: '3', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '2', TRUST_PROXY: '1' });
    expect((await postJson(`${limited.base}/api/report`, { server_url: server, success: true, latency_ms: 12 })).status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await limited?.close();
  });

  it('takes from the bucket fastify takes from, keyed by the same client address', async () => {
    const ask = (p: string, client: string) => fetch(`${limited.base}${p}`, { headers: { 'x-mcp-server': server, 'x-forwarded-for': client } });
    const before = limited.obs.fastPathAnswers();
    // Two on the fast path and one through fastify empty one client's bucket of three ...
    expect((await ask('/v1/gate', '203.0.113.7')).status).toBe(200);
    expect((await ask('/v1/gate?via=fastify', '203.0.113.7')).status).toBe(200);
    expect((await ask('/v1/gate', '203.0.113.7')).status).toBe(200);
    expect(limited.obs.fastPathAnswers()).toBe(before + 2);
    // ... so both doors refuse it now, with Retry-After, from fastify's rate-limit hook.
    for (const p of ['/v1/gate', '/v1/gate?via=fastify']) {
      const res = await ask(p, '203.0.113.7');
      await expectProblem(res.clone(), 429, 'rate_limited');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(res.headers.get('ratelimit')).toMatch(/^"gate";r=0;/);
    }
    // Another client behind the same proxy has its own bucket, on either door.
    expect((await ask('/v1/gate', '198.51.100.9')).status).toBe(200);
    expect((await ask('/v1/gate?via=fastify', '198.51.100.9')).status).toBe(200);
    expect(limited.obs.fastPathAnswers()).toBe(before + 3);
  });

  it('takes one token for a request it hands over (a denial, a refusal), not two', async () => {
    // Quotas of 3 and 2 a minute refill one token every 20 and 30 s: nothing refills during the test.
    const level = (res: Response) => Number(/;r=(\d+)/.exec(res.headers.get('ratelimit') ?? '')?.[1]);
    const ask = (p: string, headers: Record<string, string>) => fetch(`${limited.base}${p}`, { headers: { 'x-forwarded-for': '192.0.2.44', ...headers } });
    const allowed = await ask('/v1/gate', { 'x-mcp-server': server });
    expect(allowed.status).toBe(200);
    const denied = await ask('/v1/gate', { 'x-mcp-server': 'https://unrated.example.com/mcp' });
    await expectProblem(denied.clone(), 403, 'forbidden');
    expect(level(denied)).toBe(level(allowed) - 1);
    const unresolvable = await ask('/v1/gate', {});
    await expectProblem(unresolvable.clone(), 400, 'invalid_argument');
    expect(level(unresolvable)).toBe(level(denied) - 1);
    const ok = await ask(`/v1/preflight?target=${encodeURIComponent(server)}`, {});
    expect(ok.status).toBe(200);
    const refused = await ask('/v1/preflight?target=', {});
    await expectProblem(refused.clone(), 400, 'invalid_argument');
    expect(level(refused)).toBe(level(ok) - 1);
  });

  it('and so does the pre-flight check', async () => {
    const check = (p: string, client: string) => fetch(`${limited.base}${p}`, { headers: { 'x-forwarded-for': client } });
    const path = `/v1/preflight?target=${encodeURIComponent(server)}`;
    expect((await check(path, '203.0.113.8')).status).toBe(200);
    expect((await check(`${path}&`, '203.0.113.8')).status).toBe(200);
    for (const p of [path, `${path}&`]) await expectProblem(await check(p, '203.0.113.8'), 429, 'rate_limited');
    expect((await check(path, '198.51.100.10')).status).toBe(200);
  });
});

describe('the client address outside fastify', () => {
  it("is fastify's req.ip for every TRUST_PROXY setting", async () => {
    const settings: Config['trustProxy'][] = [false, true, 1, 2, ['127.0.0.1'], ['10.0.0.0/8'], ['127.0.0.0/8', '10.1.2.3']];
    const forwarded = [undefined, '203.0.113.7', '10.9.9.9, 203.0.113.7', '203.0.113.7, 10.1.2.3', 'garbage, 198.51.100.1', ''];
    for (const trust of settings) {
      const app = Fastify({ trustProxy: fastifyTrustProxy(trust) });
      const ours = clientAddressOf(trust);
      app.get('/', async (req) => ({ fastify: req.ip, ours: ours(req.raw) }));
      for (const xff of forwarded) {
        for (const remoteAddress of ['127.0.0.1', '10.1.2.3']) {
          const res = await app.inject({ url: '/', remoteAddress, headers: xff === undefined ? {} : { 'x-forwarded-for': xff } });
          const { fastify, ours: mine } = res.json() as { fastify: string; ours: string };
          expect(mine, `${JSON.stringify(trust)} ${remoteAddress} ${xff}`).toBe(fastify);
        }
      }
      await app.close();
    }
  });
});

describe('the fast path, alone', () => {
  it('hands a request to fastify when the service refuses it, or when answering it fails before anything was sent', async () => {
    const handed: string[] = [];
    const errors: unknown[] = [];
    const next = (req: { url?: string }) => void handed.push(req.url ?? '');
    const deps = (getTrust: () => Promise<object>) => ({
      trust: { getTrust } as never,
      preflight: {} as never,
      gate: {} as never,
      limits: { take: () => null },
      clientAddress: () => '127.0.0.1',
      draining: () => false,
      logsRequests: false,
      onError: (e: unknown) => void errors.push(e),
      metrics: { entry: () => ({ record() {} }) },
    });
    const req = (url: string) => ({ method: 'GET', httpVersionMajor: 1, url, headers: {} }) as never;
    const res = () => ({ headersSent: false, writeHead() {}, end() {}, destroy() {} }) as never;
    const settle = () => new Promise((r) => setTimeout(r, 10));
    // Refused: fastify answers, nothing logged.
    fastPaths(next as never, deps(() => Promise.reject(new Error('not tracked')))).handler(req('/api/trust?url=a'), res());
    await settle();
    expect(handed).toEqual(['/api/trust?url=a']);
    expect(errors).toEqual([]);
    // Writing the answer fails before anything was sent: logged, and fastify answers instead.
    const broken = { headersSent: false, writeHead() { throw new Error('cannot write'); }, end() {}, destroy() {} } as never;
    fastPaths(next as never, deps(() => Promise.resolve({}))).handler(req('/api/trust?url=b'), broken);
    await settle();
    expect(handed).toEqual(['/api/trust?url=a', '/api/trust?url=b']);
    expect(errors).toHaveLength(1);
  });
});
