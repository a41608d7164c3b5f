import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Code, ConnectError, createClient, createContextValues, type Client } from '@connectrpc/connect';
import { connectNodeAdapter, createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus as Status } from '../gen/grpc/health/v1/health_pb.js';
import { registerHealth } from '../src/http/grpc-introspection.js';
import { clientAddressKey } from '../src/services/context.js';
import { createHealthMonitor, HEALTH_WATCH_LIMITS, watchesPerClient, type HealthMonitor } from '../src/services/health.js';
import type { Db } from '../src/db/index.js';
import { forwardedFor, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Finding 3 (2026-11-28): gRPC health Watch streams had no count limit and no end: one client
// over h2c held 4,000 of them (about 42 KB of heap each), open for ever (a stream sends only when
// the status changes, so no idle deadline fires). Now, as A2A subscriptions: at most 200 per
// instance and 25 per client network, RESOURCE_EXHAUSTED beyond; each ends cleanly after 5
// minutes. Driven with the real Connect gRPC client over HTTP/2 cleartext on 127.0.0.1.

interface OpenWatch {
  first: Promise<Status>;
  /** Resolves when the stream ends: null for a clean end (status OK), else its error. */
  ended: Promise<ConnectError | null>;
  abort(): void;
}

function openWatch(client: Client<typeof Health>, service = ''): OpenWatch {
  const abort = new AbortController();
  let resolveFirst!: (s: Status) => void;
  let rejectFirst!: (e: unknown) => void;
  const first = new Promise<Status>((res, rej) => {
    resolveFirst = res;
    rejectFirst = rej;
  });
  first.catch(() => {});
  const ended = (async () => {
    try {
      let n = 0;
      for await (const r of client.watch({ service }, { signal: abort.signal })) if (n++ === 0) resolveFirst(r.status);
      rejectFirst(new Error('the stream ended before its first message'));
      return null;
    } catch (e) {
      const err = ConnectError.from(e);
      rejectFirst(err);
      return err;
    }
  })();
  return { first, ended, abort: () => abort.abort() };
}

/** How the stream ended within `ms`: its error, null for status OK, 'still open' when it has not. */
function endedWithin(w: OpenWatch, ms: number): Promise<ConnectError | null | 'still open'> {
  let timer: NodeJS.Timeout | undefined;
  const open = new Promise<'still open'>((r) => (timer = setTimeout(() => r('still open'), ms)));
  return Promise.race([w.ended, open]).finally(() => clearTimeout(timer));
}
const codeOf = (e: ConnectError | null | 'still open') => (e instanceof ConnectError ? e.code : e);

describe(`Watch streams are bounded per instance and per client network (${backend})`, () => {
  let t: TestApp;
  const clients = new Map<string, Client<typeof Health>>();
  /** One gRPC transport (one HTTP/2 connection) per client network, each with its X-Forwarded-For. */
  const from = (ip: string) => {
    let c = clients.get(ip);
    if (!c) clients.set(ip, (c = createClient(Health, createGrpcTransport({ baseUrl: t.base, interceptors: [forwardedFor(ip)] }))));
    return c;
  };
  const opened: OpenWatch[] = [];
  beforeAll(async () => {
    t = await startTestApp({ TRUST_PROXY: '1' });
  });
  afterAll(async () => {
    for (const w of opened) w.abort();
    await Promise.all(opened.map((w) => w.ended));
    await t?.close();
  });

  it('the defaults are those of A2A subscriptions: 200 per instance, 25 per client network, 5 minutes each', () => {
    expect(HEALTH_WATCH_LIMITS).toEqual({ maxWatches: 200, maxMs: 300_000 });
    expect(watchesPerClient(HEALTH_WATCH_LIMITS.maxWatches)).toBe(25);
  });

  it("a client network's 26th open stream is RESOURCE_EXHAUSTED; the instance's 201st too; an ended stream frees its place", async () => {
    const share = watchesPerClient(HEALTH_WATCH_LIMITS.maxWatches);
    const open = async (ip: string, service = '') => {
      const w = openWatch(from(ip), service);
      opened.push(w);
      return w;
    };
    // One network: its share, then a refusal before anything is sent (an unknown service counts too).
    const mine: OpenWatch[] = [];
    for (let i = 0; i < share; i++) mine.push(await open('203.0.113.1', i === 0 ? 'no.such.Service' : ''));
    expect(await Promise.all(mine.map((w) => w.first))).toEqual([Status.SERVICE_UNKNOWN, ...Array<Status>(share - 1).fill(Status.SERVING)]);
    expect(t.obs.health.watching()).toBe(share);
    const over = await endedWithin(await open('203.0.113.1'), 5_000);
    expect(codeOf(over)).toBe(Code.ResourceExhausted);
    expect((over as ConnectError).rawMessage).toMatch(/this client network holds 25 open health Watch streams/);
    // Another address of the same IPv4 network is the same network; another network is served.
    expect((await (await open('198.51.100.1')).first)).toBe(Status.SERVING);
    // Fill the instance from seven more networks (each within its share), then one more is refused.
    const fill: OpenWatch[] = [];
    for (let n = 2; n <= 8; n++) for (let i = n === 2 ? 1 : 0; i < share; i++) fill.push(await open(n === 2 ? '198.51.100.1' : `198.51.100.${n}`));
    await Promise.all(fill.map((w) => w.first));
    expect(t.obs.health.watching()).toBe(HEALTH_WATCH_LIMITS.maxWatches);
    const full = await endedWithin(await open('192.0.2.9'), 5_000);
    expect(codeOf(full)).toBe(Code.ResourceExhausted);
    expect((full as ConnectError).rawMessage).toMatch(/this instance holds 200 open health Watch streams/);
    // A client that goes away frees its place at once.
    mine[0]!.abort();
    await mine[0]!.ended;
    const deadline = Date.now() + 5_000;
    while (t.obs.health.watching() >= HEALTH_WATCH_LIMITS.maxWatches && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect((await (await open('192.0.2.9')).first)).toBe(Status.SERVING);
    // Check is not a stream: never refused.
    expect((await from('203.0.113.1').check({ service: '' })).status).toBe(Status.SERVING);
  }, 60_000);
});

describe('Watch streams end cleanly after their longest time (small limits, an h2c server of registerHealth)', () => {
  let monitor: HealthMonitor;
  let server: http2.Http2Server;
  let base: string;
  const sessions = new Set<http2.ServerHttp2Session>();
  const db = { ping: async () => true } as unknown as Db;
  beforeAll(async () => {
    monitor = createHealthMonitor({ db, intervalMs: 50, watchLimits: { maxWatches: 3, maxWatchesPerClient: 2, maxMs: 400 } });
    const handler = connectNodeAdapter({
      routes: (router) => registerHealth(router, monitor),
      contextValues: (req) => createContextValues().set(clientAddressKey, String(req.headers['x-forwarded-for'] ?? req.socket.remoteAddress)),
    });
    server = http2.createServer(handler);
    server.on('session', (s) => sessions.add(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    monitor?.drain();
    // The clients' HTTP/2 sessions stay open between calls: this server is closed with them.
    for (const s of sessions) s.destroy();
    await new Promise<void>((r) => server?.close(() => r()));
  });

  it('each stream sends SERVING, then ends with status OK after maxMs; its place is free again', async () => {
    const a = createClient(Health, createGrpcTransport({ baseUrl: base, interceptors: [forwardedFor('10.0.0.1')] }));
    const b = createClient(Health, createGrpcTransport({ baseUrl: base, interceptors: [forwardedFor('10.0.0.2')] }));
    const started = performance.now();
    const streams = [openWatch(a), openWatch(a), openWatch(b)];
    expect(await Promise.all(streams.map((s) => s.first))).toEqual([Status.SERVING, Status.SERVING, Status.SERVING]);
    // Full: the client's share (2), and the instance's (3).
    expect(codeOf(await endedWithin(openWatch(a), 3_000))).toBe(Code.ResourceExhausted);
    expect(codeOf(await endedWithin(openWatch(createClient(Health, createGrpcTransport({ baseUrl: base, interceptors: [forwardedFor('10.0.0.3')] }))), 3_000))).toBe(Code.ResourceExhausted);
    // No status change, no idle deadline: the streams end by their time, cleanly.
    expect(await Promise.all(streams.map((s) => endedWithin(s, 5_000)))).toEqual([null, null, null]);
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(350);
    expect(took).toBeLessThan(5_000);
    expect(monitor.watching()).toBe(0);
    const again = openWatch(a);
    expect(await again.first).toBe(Status.SERVING);
    expect(await endedWithin(again, 5_000)).toBeNull();
  });
});
