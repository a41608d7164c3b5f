// Answers nobody reads are bounded (docs/reliability.md "Answers nobody reads"). An answer is
// built and written into node's buffers whether or not its client reads it: one client network
// with HTTP/2 connections announcing a receive window of 0, or pipelining HTTP/1.1 requests on a
// socket it never reads, held every answer it asked for (measured: 9,200 copies of /openapi.json,
// 700 MB; 608 A2A answers of 1 MiB, 1.2 GB). Now answers of 4 KiB or more count against
// HTTP_ANSWER_BUDGET_BYTES, one client network an eighth of it; past either the answer is refused
// (429 or 503 with Retry-After in its place, or its stream reset), and a network holding its
// share is refused 429 before its requests are handled.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { loadConfig } from '../src/config.js';
import { createObservatory, type Observatory } from '../src/server.js';
import { a2aTaskStore } from '../src/store/a2a-tasks.js';
import type { DualProtocolServer } from '../src/http/listener.js';
import { postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { TEST_KEK_TEXT } from './support/keys.js';
import { expectConfigRefusal } from './support/config.js';
import { eventually, rawConnect } from './support/connections.js';

const KiB = 1024;
const MiB = 1024 * KiB;
// Eight shares of 1 MiB: four answers of a network's share, 32 for the process.
const BUDGET = 8 * MiB;
const SHARE = BUDGET / 8;
const TASK = 'answer-budget-task';

let t: TestApp;
let port: number;
/** Bytes of the GetTask answer of TASK (about 256 KiB). */
let answerBytes: number;
const getTask = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: TASK } });

beforeAll(async () => {
  t = await startTestApp({ HTTP_ANSWER_BUDGET_BYTES: String(BUDGET), RATE_LIMIT_A2A_READS_PER_MINUTE: '0', RATE_LIMIT_PAGES_PER_MINUTE: '0' });
  port = Number(new URL(t.base).port);
  // A task of four messages of 62 KiB: GetTask answers about 256 KiB, built per request.
  const history = Array.from({ length: 4 }, (_, i) => ({
    kind: 'message',
    role: 'user',
    messageId: `m${i}`,
    taskId: TASK,
    contextId: 'answer-budget',
    parts: [{ kind: 'text', text: 'trust score' }, { kind: 'data', data: { pad: 'x'.repeat(62 * KiB) } }],
  }));
  await a2aTaskStore(t.tdb.db).insert({ id: TASK, contextId: 'answer-budget', kind: 'task', status: { state: 'input-required', timestamp: new Date().toISOString() }, artifacts: [], history }, new Date());
  const res = await postJson(`${t.base}/a2a`, JSON.parse(getTask), { 'A2A-Version': '1.0' });
  answerBytes = (await res.arrayBuffer()).byteLength;
  expect(res.status).toBe(200);
  expect(answerBytes).toBeGreaterThan(240 * KiB);
  expect(answerBytes).toBeLessThan(SHARE / 2);
}, 120_000);
afterAll(async () => {
  await t?.close();
});
/** Sessions a test leaves open when it fails: destroyed after it (a graceful close waits for their streams). */
const onExit: (() => void)[] = [];
afterEach(() => {
  for (const f of onExit.splice(0)) f();
});

/** What the service counts now (the budget of this change; undefined on code without it). */
const budget = () => (t.obs.app.server as Partial<DualProtocolServer>).answerBudget;

/** An h2c session from a loopback address of its own (another client network) that reads nothing: its streams' window is 0. */
function deafSession(from: string): http2.ClientHttp2Session {
  const s = http2.connect(t.base, { settings: { initialWindowSize: 0 }, createConnection: () => net.connect({ port, host: '127.0.0.1', localAddress: from }) });
  s.on('error', () => {});
  return s;
}

interface Asked {
  status: number;
  headers: http2.IncomingHttpHeaders;
  /** The stream's RST_STREAM code once closed (undefined while open). */
  reset: number | undefined;
  closed: boolean;
}

/** Asks `n` GetTask calls on the session and never reads their answers. */
function ask(s: http2.ClientHttp2Session, n: number): Asked[] {
  return Array.from({ length: n }, () => {
    const a: Asked = { status: 0, headers: {}, reset: undefined, closed: false };
    const st = s.request({ ':method': 'POST', ':path': '/a2a', 'content-type': 'application/json', 'a2a-version': '1.0', 'content-length': String(Buffer.byteLength(getTask)) });
    st.on('error', () => {});
    st.on('response', (h) => {
      a.status = Number(h[':status']);
      a.headers = h;
    });
    st.on('close', () => {
      a.closed = true;
      a.reset = st.rstCode;
    });
    st.end(getTask);
    return a;
  });
}

/** Answered (a head, or the stream ended without one). */
const settled = (a: Asked) => a.status !== 0 || a.closed;
/** An answer the service still holds: 200, its stream open. */
const held = (a: Asked) => a.status === 200 && !a.closed;

/** A GetTask read whole over HTTP/1.1 from a loopback address: status, Retry-After, body bytes. */
function readWhole(from: string): Promise<{ status: number; retryAfter: string | undefined; bytes: number; type: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: '/a2a', method: 'POST', localAddress: from, agent: false, headers: { 'content-type': 'application/json', 'a2a-version': '1.0', connection: 'close' } },
      (res) => {
        let bytes = 0;
        res.on('data', (d: Buffer) => (bytes += d.length));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], bytes, type: res.headers['content-type'] }));
      },
    );
    req.on('error', reject);
    req.end(getTask);
  });
}

describe(`answers nobody reads (${backend})`, () => {
  it('HTTP/2 with a window of 0: one client network holds its share, the rest is refused 429 in the answer\'s place, other networks are served', async () => {
    const a = deafSession('127.0.0.21');
    const b = deafSession('127.0.0.21');
    onExit.push(() => (a.destroy(), b.destroy()));
    const asked = [...ask(a, 20), ...ask(b, 20)];
    expect(await eventually(() => asked.every(settled))).toBe(true);
    // Before the bound all 40 answers (10 MiB) were held, 200 with their streams open.
    const kept = asked.filter(held);
    expect(kept.length * answerBytes).toBeLessThanOrEqual(SHARE + answerBytes);
    expect(kept.length).toBeGreaterThan(0);
    const refused = asked.filter((x) => !held(x));
    for (const r of refused) {
      if (r.status === 429) expect(r.headers['retry-after']).toBe('2');
      else expect(r.reset).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    }
    expect(budget()!.held().total).toBeLessThanOrEqual(SHARE + answerBytes);

    // Another network is served whole meanwhile.
    const other = await readWhole('127.0.0.22');
    expect(other).toMatchObject({ status: 200, bytes: answerBytes });
    // The greedy network is refused before its request is handled, in problem+json.
    const again = await readWhole('127.0.0.21');
    expect(again.status).toBe(429);
    expect(again.retryAfter).toBe('2');
    expect(again.type).toMatch(/^application\/problem\+json/);

    // Gone: what it held is released, and it is served again.
    a.destroy();
    b.destroy();
    expect(await eventually(() => budget()!.held().total === 0)).toBe(true);
    expect(await readWhole('127.0.0.21')).toMatchObject({ status: 200, bytes: answerBytes });
  });

  it('the process holds at most its budget: ten networks fill it, another network is refused 503 in the answer\'s place', async () => {
    const sessions = Array.from({ length: 10 }, (_, i) => deafSession(`127.0.1.${i + 1}`));
    try {
      const asked = sessions.flatMap((s) => ask(s, 6));
      expect(await eventually(() => asked.every(settled))).toBe(true);
      // Before the bound: all 60 held, 15 MiB.
      expect(asked.filter(held).length * answerBytes).toBeLessThanOrEqual(BUDGET);
      expect(budget()!.held().total).toBeLessThanOrEqual(BUDGET);
      expect(budget()!.refused().total).toBeGreaterThan(0);

      const another = await readWhole('127.0.1.11');
      expect(another.status).toBe(503);
      expect(another.retryAfter).toBe('2');
      expect(another.type).toMatch(/^application\/problem\+json/);
    } finally {
      for (const s of sessions) s.destroy();
    }
    expect(await eventually(() => budget()!.held().total === 0)).toBe(true);
    expect(await readWhole('127.0.1.11')).toMatchObject({ status: 200, bytes: answerBytes });
  });

  it('HTTP/1.1 pipelined on a socket that is never read: the service holds at most the share', async () => {
    const responses: http.ServerResponse[] = [];
    const onRequest = (_req: http.IncomingMessage, res: http.ServerResponse) => responses.push(res);
    t.obs.app.server.on('request', onRequest);
    const n = 90;
    const one = `POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: ${Buffer.byteLength(getTask)}\r\n\r\n${getTask}`;
    const c = await rawConnect(port, undefined, '127.0.0.31');
    c.socket.pause();
    c.socket.write(one.repeat(n));
    try {
      // Every request has its answer's head written (its answer, or a refusal in its place).
      expect(await eventually(() => responses.length === n && responses.every((r) => r.headersSent))).toBe(true);
      // What the process holds for this connection: queued answers and the socket's unsent bytes.
      const heldBytes = responses.reduce((sum, r) => sum + r.writableLength, 0);
      // Before the bound: every answer the kernel did not take, about 18 MiB.
      expect(heldBytes).toBeLessThanOrEqual(SHARE + answerBytes);
      expect(responses.filter((r) => r.statusCode === 429).length).toBeGreaterThan(0);
    } finally {
      t.obs.app.server.off('request', onRequest);
      c.socket.destroy();
    }
    expect(await eventually(() => budget()!.held().total === 0)).toBe(true);
  });

  it('small answers and shared documents are never counted', async () => {
    await postJson(`${t.base}/api/report`, { server_url: 'https://small.example.com/mcp', success: true, latency_ms: 20 });
    const s = deafSession('127.0.0.51');
    onExit.push(() => s.destroy());
    const streams = [
      ...Array.from({ length: 30 }, () => s.request({ ':path': `/api/trust?url=${encodeURIComponent('https://small.example.com/mcp')}` })),
      ...Array.from({ length: 30 }, () => s.request({ ':path': '/openapi.json' })),
      ...Array.from({ length: 30 }, () => s.request({ ':path': '/llms.txt' })),
    ];
    const statuses: number[] = [];
    for (const st of streams) {
      st.on('error', () => {});
      st.on('response', (h) => statuses.push(Number(h[':status'])));
    }
    expect(await eventually(() => statuses.length === streams.length)).toBe(true);
    expect(statuses.every((x) => x === 200)).toBe(true);
    expect(budget()!.held().total).toBe(0);
    s.destroy();
  });

  it('HTTP_ANSWER_BUDGET_BYTES below 1 MiB is refused at start', () => {
    expectConfigRefusal('HTTP_ANSWER_BUDGET_BYTES', String(MiB - 1));
  });
});

describe(`a Connect unary answer over the share (${backend})`, () => {
  let obs: Observatory;
  let tdb: TestDatabase;
  let base: string;
  let cport: number;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', KEY_ENCRYPTION_KEY: TEST_KEK_TEXT });
    // Below what HTTP_ANSWER_BUDGET_BYTES accepts: a share of 8 KiB, about one leaderboard of 25 servers (7 KB).
    config.http.answerBudgetBytes = 64 * KiB;
    obs = await createObservatory(config, { db: tdb.db, logger: false });
    cport = Number(new URL(await obs.listen()).port);
    base = `http://127.0.0.1:${cport}`;
    for (let i = 0; i < 25; i++) await postJson(`${base}/api/report`, { server_url: `https://budget-${i}.example.com/mcp`, success: true, latency_ms: 20 });
  }, 120_000);
  afterAll(async () => {
    await obs?.close();
    await tdb?.drop();
  });

  it('is refused resource_exhausted with Retry-After in its place, in the Connect protocol; other networks are served', async () => {
    const from = '127.0.0.61';
    const body = JSON.stringify({ limit: 100 });
    const deaf = http2.connect(base, { settings: { initialWindowSize: 0 }, createConnection: () => net.connect({ port: cport, host: '127.0.0.1', localAddress: from }) });
    deaf.on('error', () => {});
    onExit.push(() => deaf.destroy());
    const st = deaf.request({ ':method': 'POST', ':path': '/observatory.v1.TrustService/GetLeaderboard', 'content-type': 'application/json', 'content-length': String(body.length) });
    st.on('error', () => {});
    let status = 0;
    st.on('response', (h) => (status = Number(h[':status'])));
    st.end(body);
    // The network's first answer is held whatever its size.
    expect(await eventually(() => status !== 0)).toBe(true);
    expect(status).toBe(200);

    // No compression: the leaderboard's 7 KB stays above the 4 KiB from which answers count.
    const transport = (localAddress: string) => createConnectTransport({ baseUrl: base, httpVersion: '1.1', acceptCompression: [], nodeOptions: { localAddress } });
    const err = await createClient(TrustService, transport(from))
      .getLeaderboard({ limit: 100 })
      .then(
        () => null,
        (e: unknown) => ConnectError.from(e),
      );
    // Before the bound: served, and held as well.
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(err?.metadata.get('retry-after')).toBe('2');
    const served = await createClient(TrustService, transport('127.0.0.62')).getLeaderboard({ limit: 100 });
    expect(served.servers.length).toBeGreaterThanOrEqual(25);
    deaf.destroy();
  });
});
