// An HTTP/1.1 connection has at most HTTP2_MAX_CONCURRENT_STREAMS requests in flight
// (docs/reliability.md "Answers nobody reads"). Node handles every request of what it reads at
// once and queues their answers, however many: one client network pipelining /metrics 1,000 deep
// on 94 connections, never reading, had 753 MiB of queued answers in the heap after 43 s.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually, rawConnect } from './support/connections.js';

const LIMIT = 20;
let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await startTestApp({ HTTP2_MAX_CONCURRENT_STREAMS: String(LIMIT) });
  port = Number(new URL(t.base).port);
});
afterAll(async () => {
  await t?.close();
});

const answers = (raw: string) => raw.match(/HTTP\/1\.1 200 /g)?.length ?? 0;

describe(`HTTP/1.1 requests in flight on one connection (${backend})`, () => {
  it('as many as HTTP2_MAX_CONCURRENT_STREAMS pipelined at once are all answered, and the connection stays open', async () => {
    const c = await rawConnect(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(LIMIT));
    expect(await eventually(() => answers(c.data()) === LIMIT)).toBe(true);
    expect(c.endedByServer()).toBe(false);
    c.socket.destroy();
  });

  it('more than that, pipelined without reading: the connection is closed and the requests beyond are not handled', async () => {
    const url = 'https://in-flight.example.com/mcp';
    const body = JSON.stringify({ server_url: url, success: true, latency_ms: 12 });
    const one = `POST /api/report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const c = await rawConnect(port);
    c.socket.pause();
    c.socket.write(one.repeat(LIMIT * 5));
    // Before: all 100 handled, their answers queued behind each other, the connection open.
    expect(await c.closedWithin()).toBe(true);
    c.socket.destroy();
    // Only reports that were handled were stored: at most the limit.
    const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`);
    const stored = res.status === 404 ? 0 : ((await res.json()) as { metrics: { total_interactions: number } }).metrics.total_interactions;
    expect(stored).toBeLessThanOrEqual(LIMIT);
  });
});
