import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { rawExchange } from './support/connections.js';
import { fastReads } from '../src/http/fast-reads.js';

// Cached trust reads answered before fastify's lifecycle (src/http/fast-reads.ts, issue 22):
// the same answer as the fastify route, byte for byte, and every request the fast path does not
// take reaches fastify as before. A query ending in `&` parses the same in fastify but is not
// taken by the fast path: the two paths side by side.

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

/** Status, headers (without the per-request id and date) and body of one answer. */
async function answer(p: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.base}${p}`, { headers });
  const h = Object.fromEntries([...res.headers].filter(([k]) => k !== 'x-request-id' && k !== 'date'));
  return { status: res.status, headers: h, names: [...res.headers.keys()], id: res.headers.get('x-request-id'), body: await res.text() };
}

describe(`the fast path for cached trust reads (${backend})`, () => {
  it('answers exactly what the fastify route answers: status, headers, body', async () => {
    const before = t.obs.fastReadsAnswered();
    const [fast, slow] = [await answer(path), await answer(`${path}&`)];
    expect(t.obs.fastReadsAnswered()).toBe(before + 1);
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
    const answered = t.obs.fastReadsAnswered();
    for (let i = 0; i < 3; i++) expect((await fetch(`${t.base}${path}`)).status).toBe(200);
    expect(t.obs.fastReadsAnswered()).toBe(answered + 3);
    expect(await count()).toBe(before + 3);
  });

  it('asks the service once per read, also when it refuses (the refusal goes to fastify with the request)', async () => {
    const trust = t.obs.services.trust;
    const getTrust = trust.getTrust;
    let calls = 0;
    trust.getTrust = ((...a: Parameters<typeof getTrust>) => {
      calls++;
      return getTrust(...a);
    }) as typeof getTrust;
    try {
      await expectProblem(await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://nobody.example.com/mcp')}`), 404, 'not_tracked');
      expect(calls).toBe(1);
      await expectProblem(await fetch(`${t.base}/api/trust?url=ftp%3A%2F%2Fx`), 400, 'invalid_argument');
      expect(calls).toBe(2);
      expect((await fetch(`${t.base}${path}`)).status).toBe(200);
      expect(calls).toBe(3);
    } finally {
      trust.getTrust = getTrust;
    }
  });

  it('leaves every other request to fastify, unchanged', async () => {
    const before = t.obs.fastReadsAnswered();
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
    expect(t.obs.fastReadsAnswered()).toBe(before);
  });
});

describe('the fast path, alone', () => {
  it('hands a request to fastify when the service refuses it, or when answering it fails before anything was sent', async () => {
    const handed: string[] = [];
    const errors: unknown[] = [];
    const next = (req: { url?: string }) => void handed.push(req.url ?? '');
    const deps = (getTrust: () => Promise<object>) => ({
      trust: { getTrust } as never,
      draining: () => false,
      logsRequests: false,
      onError: (e: unknown) => void errors.push(e),
      metrics: { entry: () => ({ record() {} }) },
    });
    const req = (url: string) => ({ method: 'GET', httpVersionMajor: 1, url, headers: {} }) as never;
    const res = () => ({ headersSent: false, writeHead() {}, end() {}, destroy() {} }) as never;
    const settle = () => new Promise((r) => setTimeout(r, 10));
    // Refused: fastify answers, nothing logged.
    fastReads(next as never, deps(() => Promise.reject(new Error('not tracked')))).handler(req('/api/trust?url=a'), res());
    await settle();
    expect(handed).toEqual(['/api/trust?url=a']);
    expect(errors).toEqual([]);
    // Writing the answer fails before anything was sent: logged, and fastify answers instead.
    const broken = { headersSent: false, writeHead() { throw new Error('cannot write'); }, end() {}, destroy() {} } as never;
    fastReads(next as never, deps(() => Promise.resolve({}))).handler(req('/api/trust?url=b'), broken);
    await settle();
    expect(handed).toEqual(['/api/trust?url=a', '/api/trust?url=b']);
    expect(errors).toHaveLength(1);
  });
});
