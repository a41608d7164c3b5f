// Request bodies in flight are bounded (docs/reliability.md "Request bodies in flight"): one client
// sending all but the last bytes of many OTLP exports over HTTP/2 held 4 MiB per stream, 800 MB
// with two connections. Each request reserves what it may hold before its body is read; over a
// client network's share it is answered 429, over the process's budget 503, body unread.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http2 from 'node:http2';
import net from 'node:net';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { expectConfigRefusal } from './support/config.js';
import { eventually, rawConnect, rawGet, statusOf } from './support/connections.js';

const MiB = 1024 * 1024;
// The smallest budget allowed: eight of the largest body (4 MiB), so one client network's share
// (an eighth) is one OTLP export.
const BUDGET = 32 * MiB;

let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await startTestApp({ HTTP_BODY_BUDGET_BYTES: String(BUDGET) });
  port = Number(new URL(t.base).port);
});
afterAll(async () => {
  await t?.close();
});

/** An h2c session from a loopback address of its own (another client network). */
function session(from = '127.0.0.1'): http2.ClientHttp2Session {
  const s = http2.connect(t.base, { createConnection: () => net.connect({ port, host: '127.0.0.1', localAddress: from }) });
  s.on('error', () => {});
  return s;
}

/** An OTLP export that declares no length and is left unfinished: its status once answered (0 while none), and its stream. */
function openExport(s: http2.ClientHttp2Session, bytes: number) {
  const stream = s.request({ ':method': 'POST', ':path': '/v1/traces', 'content-type': 'application/x-protobuf' });
  stream.on('error', () => {});
  const answer = { status: 0, headers: {} as http2.IncomingHttpHeaders, body: '' };
  stream.on('response', (h) => {
    answer.status = Number(h[':status']);
    answer.headers = h;
  });
  stream.on('data', (d: Buffer) => (answer.body += d.toString()));
  stream.write(Buffer.alloc(bytes, 0x0a));
  return { stream, answer };
}

const REPORT = JSON.stringify({ server_url: 'https://budget.example.com/mcp', success: true, latency_ms: 12 });
const report = (from?: string) =>
  rawConnect(
    port,
    `POST /api/report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(REPORT)}\r\nConnection: close\r\n\r\n${REPORT}`,
    from,
  ).then(async (c) => {
    await c.closedWithin();
    return c.data();
  });


async function budgetMetrics(): Promise<{ held: number; refusedPerClient: number; refusedBudget: number }> {
  const m = await rawGet(port, '/metrics');
  const num = (re: RegExp) => Number(re.exec(m)?.[1] ?? NaN);
  return {
    held: num(/observatory_http_request_body_bytes\{state="held"\} (\d+)/),
    refusedPerClient: num(/observatory_http_request_body_refused_total\{over="per_client"\} (\d+)/),
    refusedBudget: num(/observatory_http_request_body_refused_total\{over="budget"\} (\d+)/),
  };
}

describe(`request bodies in flight (${backend})`, () => {
  it("holds one client network to its share: more unfinished exports are answered 429 at once, body unread; other networks are served", async () => {
    const s = session();
    const first = openExport(s, 1024 * 1024);
    // The next ones, from the same network, exceed its share (one 4 MiB export): answered without reading them.
    const more = Array.from({ length: 20 }, () => openExport(s, 256 * 1024));
    expect(await eventually(() => more.every((e) => e.answer.status !== 0), 10_000)).toBe(true);
    for (const e of more) {
      expect(e.answer.status).toBe(429);
      // An OTLP route answers its own error body: a google.rpc.Status (test/otlp.refusals.test.ts).
      expect(e.answer.headers['content-type']).toBe('application/x-protobuf');
      expect(e.answer.headers['retry-after']).toBeDefined();
    }
    expect(first.answer.status).toBe(0);
    // Even a small report from that network waits for its share; another network's is stored.
    expect(statusOf(await report())).toBe(429);
    expect(statusOf(await report('127.0.0.2'))).toBe(200);
    // A gRPC call is told in its own protocol (RESOURCE_EXHAUSTED), by the official client.
    const telemetry = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    const err = await telemetry.report({ serverUrl: 'https://budget.example.com/mcp', success: true, latencyMs: 5 }).catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);

    // The unfinished export ends (the client gives up): its reservation ends with it.
    first.stream.close(http2.constants.NGHTTP2_CANCEL);
    expect(await eventually(() => first.stream.closed, 10_000)).toBe(true);
    let stored = 0;
    for (let i = 0; i < 50 && stored === 0; i++) {
      if (statusOf(await report()) === 200) stored++;
      else await new Promise((r) => setTimeout(r, 100));
    }
    expect(stored).toBe(1);
    s.close();
    const m = await budgetMetrics();
    expect(m.refusedPerClient).toBeGreaterThanOrEqual(21);
  });

  it('holds the process to its budget: once eight networks hold their shares, a ninth is answered 503', async () => {
    const sessions = Array.from({ length: 8 }, (_, i) => session(`127.0.1.${i + 1}`));
    const held = sessions.map((s) => openExport(s, 64 * 1024));
    expect(await eventually(async () => (await budgetMetrics()).held >= BUDGET, 10_000)).toBe(true);
    const ninth = session('127.0.1.9');
    const refused = openExport(ninth, 1024);
    expect(await eventually(() => refused.answer.status !== 0, 10_000)).toBe(true);
    expect(refused.answer.status).toBe(503);
    expect(refused.answer.body).toContain('HTTP_BODY_BUDGET_BYTES');
    // A request without a body needs no budget.
    expect(statusOf(await rawGet(port, '/healthz'))).toBe(200);
    for (const h of held) expect(h.answer.status).toBe(0);
    // The clients go away with their bodies unfinished: every reservation ends with its connection.
    for (const s of [...sessions, ninth]) s.destroy();
    expect(await eventually(async () => (await budgetMetrics()).held === 0, 10_000)).toBe(true);
    expect((await budgetMetrics()).refusedBudget).toBeGreaterThanOrEqual(1);
  });

  it('refuses a budget that cannot hold eight of the largest body', () => {
    expectConfigRefusal('HTTP_BODY_BUDGET_BYTES', String(BUDGET - 1));
    expectConfigRefusal('HTTP_BODY_BUDGET_BYTES', 'lots');
  });
});
