// The dual-protocol listener on its own (no database): deadlines count only while the service
// waits on the client, so a slow handler or a stream that keeps moving is never cut, while a
// client that stops reading a response is. And the connection cap derived from the open-file limit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { HttpConfig } from '../src/config.js';
import { connectionCap, DERIVED_MAX_CONNECTIONS, FALLBACK_MAX_CONNECTIONS, MIN_CONNECTIONS_PER_CLIENT, overflowFor, perClientLimit } from '../src/http/connection-cap.js';
import { trustedPeer } from '../src/http/client-address.js';
import { createDualProtocolServer, type DualProtocolServer } from '../src/http/listener.js';
import { eventually, H2_PREFACE, h2Connect, rawConnect, statusOf } from './support/connections.js';

const LIMITS: HttpConfig = {
  firstByteTimeoutMs: 300,
  headersTimeoutMs: 300,
  requestTimeoutMs: 600,
  idleTimeoutMs: 300,
  h2SessionIdleTimeoutMs: 300,
  h2MaxConcurrentStreams: 8,
  maxConnections: 64,
  maxConnectionsPerClient: 0,
  trustProxy: false,
  bodyBudgetBytes: 256 * 1024 * 1024,
};
// Longer than every deadline above, several times over.
const SLOW_MS = 2_500;

let server: DualProtocolServer;
let held = -1;
/** How many /slow-big answers have been handed to the listener so far. */
let slowBigAnswers = 0;
let base: string;
let port: number;

beforeAll(async () => {
  server = createDualProtocolServer((req, res) => {
    const url = req.url ?? '/';
    if (url === '/slow') {
      // The handler works (no bytes either way) for longer than every deadline.
      setTimeout(() => res.end('done'), SLOW_MS);
    } else if (url === '/trickle') {
      // A response that keeps moving, one small chunk at a time, for longer than every deadline.
      let n = 0;
      const iv = setInterval(() => {
        (res as http.ServerResponse).write(`chunk ${n++}\n`);
        if (n === 25) {
          clearInterval(iv);
          res.end();
        }
      }, SLOW_MS / 25);
    } else if (url === '/slow-big') {
      // First the handler works for longer than every deadline (a deadline passes with nobody to
      // blame), then it answers far more than the client's flow-control window.
      setTimeout(() => {
        slowBigAnswers++;
        res.end(Buffer.alloc(4 * 1024 * 1024, 'x'));
      }, SLOW_MS);
    } else if (url === '/big') {
      // Far more than the client's flow-control window: the rest waits for the client to read.
      res.end(Buffer.alloc(4 * 1024 * 1024, 'x'));
    } else {
      res.end('ok');
    }
  }, LIMITS);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function h2Get(session: http2.ClientHttp2Session, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':path': path });
    let body = '';
    let status = 0;
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => resolve({ status, body }));
    req.on('error', reject);
  });
}

/** Waits (bounded) until the listener holds a number of connections that `ok` accepts. */
function connectionsEventually(ok: (n: number) => boolean): Promise<boolean> {
  return eventually(() => {
    server.getConnections((_err, n) => (held = n));
    return ok(held);
  });
}

/**
 * Asks for `path` on a new HTTP/2 connection and never reads the answer (the server's data waits
 * in the client's flow-control window): the stream's reset code (null when not reset within
 * 20 s), and whether the connection then closed.
 */
async function unreadStream(path: string): Promise<{ rst: number | null; closed: boolean }> {
  const h2 = h2Connect(base);
  const req = h2.session.request({ ':path': path });
  req.on('error', () => {});
  req.pause();
  const rst = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => resolve(null), 20_000);
    req.once('close', () => {
      clearTimeout(timer);
      resolve(req.rstCode ?? null);
    });
  });
  return { rst, closed: await h2.closedWithin() };
}

describe('deadlines count only while the service waits on the client', () => {
  it('does not cut an HTTP/1.1 request whose handler takes longer than every deadline', async () => {
    const c = await rawConnect(port, 'GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(await c.closedWithin()).toBe(true);
    expect(statusOf(c.data())).toBe(200);
    expect(c.data()).toMatch(/done$/);
  });

  it('does not cut an HTTP/1.1 response that keeps moving for longer than every deadline', async () => {
    const c = await rawConnect(port, 'GET /trickle HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(await c.closedWithin()).toBe(true);
    expect(statusOf(c.data())).toBe(200);
    expect(c.data()).toContain('chunk 24');
  });

  it('does not cut an HTTP/2 stream whose handler takes longer than every deadline', async () => {
    const h2 = h2Connect(base);
    expect(await h2Get(h2.session, '/slow')).toEqual({ status: 200, body: 'done' });
    h2.session.close();
  });

  it('does not cut an HTTP/2 response that keeps moving for longer than every deadline', async () => {
    const h2 = h2Connect(base);
    const res = await h2Get(h2.session, '/trickle');
    expect(res.status).toBe(200);
    expect(res.body.split('\n').filter(Boolean)).toHaveLength(25);
    h2.session.close();
  });

  it('closes an HTTP/1.1 connection whose client stops reading the response', async () => {
    const c = await rawConnect(port, 'GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
    c.socket.pause(); // never read: the response fills the socket buffers and waits
    expect(await connectionsEventually((n) => n === 0)).toBe(true);
    c.socket.destroy();
  });

  it('resets an HTTP/2 stream whose client stops reading the response', async () => {
    expect(await unreadStream('/big')).toEqual({ rst: http2.constants.NGHTTP2_CANCEL, closed: true });
  });

  it('closes an HTTP/1.1 connection whose client stops reading an answer that came after a slow handler', async () => {
    const answered = slowBigAnswers;
    const c = await rawConnect(port, 'GET /slow-big HTTP/1.1\r\nHost: x\r\n\r\n');
    c.socket.pause();
    // The connection is held while the handler works and when its answer starts to wait...
    expect(await eventually(() => slowBigAnswers > answered, SLOW_MS * 4)).toBe(true);
    expect(await connectionsEventually((n) => n > 0)).toBe(true);
    // ...and released once the client has not read for a deadline.
    expect(await connectionsEventually((n) => n === 0)).toBe(true);
    c.socket.destroy();
  });

  it('resets an HTTP/2 stream whose client stops reading an answer that came after a slow handler', async () => {
    // The stream's deadline passed once while the handler worked (nothing to cut then); the stall
    // that follows must still be seen.
    expect(await unreadStream('/slow-big')).toEqual({ rst: http2.constants.NGHTTP2_CANCEL, closed: true });
  });

  it('closes an HTTP/2 session that only sends PINGs (pings are not activity)', async () => {
    const h2 = h2Connect(base);
    const iv = setInterval(() => {
      if (!h2.session.destroyed && !h2.session.closed) h2.session.ping(() => {});
    }, 50);
    try {
      expect(await h2.closedWithin()).toBe(true);
    } finally {
      clearInterval(iv);
    }
  });
});

/** One HTTP/2 frame: 9-byte header (length, type, flags, stream id), then the payload. */
function h2Frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head.writeUInt8(type, 3);
  head.writeUInt8(flags, 4);
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/** The frames in a byte sequence from the server (whole frames only). */
function h2Frames(bytes: Buffer): { type: number; flags: number; streamId: number; payload: Buffer }[] {
  const out = [];
  for (let at = 0; at + 9 <= bytes.length; ) {
    const length = bytes.readUIntBE(at, 3);
    if (at + 9 + length > bytes.length) break;
    out.push({ type: bytes[at + 3]!, flags: bytes[at + 4]!, streamId: bytes.readUInt32BE(at + 5) & 0x7fffffff, payload: bytes.subarray(at + 9, at + 9 + length) });
    at += 9 + length;
  }
  return out;
}

describe('HTTP/2 streams per connection', () => {
  it('advertises its stream limit, and a client that keeps to it gets every call answered', async () => {
    const h2 = h2Connect(base);
    await new Promise<void>((resolve) => (h2.session.remoteSettings.maxConcurrentStreams === LIMITS.h2MaxConcurrentStreams ? resolve() : h2.session.once('remoteSettings', () => resolve())));
    expect(h2.session.remoteSettings.maxConcurrentStreams).toBe(LIMITS.h2MaxConcurrentStreams);
    // Twice the limit of slow calls at once: node's client holds back what the limit does not allow.
    const answers = await Promise.all(Array.from({ length: LIMITS.h2MaxConcurrentStreams * 2 }, () => h2Get(h2.session, '/slow')));
    expect(answers.every((a) => a.status === 200 && a.body === 'done')).toBe(true);
    h2.session.close();
  });

  it('closes the connection of a client that opens more streams than the limit, and serves others on', async () => {
    // A client that ignores SETTINGS_MAX_CONCURRENT_STREAMS, as an attacker's would (node's own
    // client cannot be made to, so the frames are written by hand): one stream over the limit
    // is a protocol error for node's HTTP/2 (nghttp2), which ends the whole connection (every
    // stream reset, GOAWAY) before any handler answers.
    const c = await rawConnect(port, Buffer.concat([Buffer.from(H2_PREFACE), h2Frame(0x4, 0, 0)]));
    const frames = () => h2Frames(Buffer.from(c.data(), 'latin1'));
    expect(await eventually(() => frames().some((f) => f.type === 0x4 && (f.flags & 0x1) === 0), 5_000)).toBe(true);
    c.socket.write(h2Frame(0x4, 0x1, 0)); // SETTINGS ACK: the limit is in force
    // GET /slow, HPACK: :method GET and :scheme http from the static table, :path and :authority literal.
    const path = Buffer.from('/slow');
    const headers = Buffer.concat([Buffer.from([0x82, 0x86, 0x04, path.length]), path, Buffer.from([0x01, 1]), Buffer.from('x')]);
    for (let i = 0; i <= LIMITS.h2MaxConcurrentStreams; i++) c.socket.write(h2Frame(0x1, 0x4 | 0x1, 1 + 2 * i, headers)); // HEADERS, END_HEADERS | END_STREAM
    expect(await eventually(() => frames().some((f) => f.type === 0x7), 5_000)).toBe(true); // GOAWAY
    expect(await c.closedWithin()).toBe(true);
    expect(frames().filter((f) => f.type === 0x1)).toEqual([]); // no stream was answered
    // Exactly the limit is fine, and the listener serves the next client as before.
    const h2 = h2Connect(base);
    expect(await h2Get(h2.session, '/')).toEqual({ status: 200, body: 'ok' });
    h2.session.close();
  });
});

describe('connection cap', () => {
  it('uses MAX_CONNECTIONS when set', () => {
    expect(connectionCap(100, { softLimit: 256, inUse: 200 })).toEqual({ served: 100, overflow: overflowFor(100), source: 'MAX_CONNECTIONS' });
  });

  it('leaves the descriptors already open and a reserve when derived from the open-file limit', () => {
    for (const [softLimit, inUse] of [
      [256, 130],
      [1024, 40],
      [1024, 900],
      [65_536, 200],
      [1_048_576, 150],
    ] as const) {
      const cap = connectionCap(0, { softLimit, inUse });
      const reserve = Math.max(64, Math.floor(softLimit / 8));
      expect(cap.source).toBe('descriptor limit');
      expect(cap.served).toBeGreaterThanOrEqual(4);
      expect(cap.served).toBeLessThanOrEqual(DERIVED_MAX_CONNECTIONS);
      // Served and overflow together never eat into the reserve (unless the minimum of 4 + 4 must).
      if (softLimit - inUse - reserve >= 8) expect(inUse + cap.served + cap.overflow + reserve).toBeLessThanOrEqual(softLimit);
    }
    expect(connectionCap(0, { softLimit: 256, inUse: 130 }).served).toBeGreaterThan(30);
  });

  it('falls back to a fixed cap where the limit cannot be read', () => {
    expect(connectionCap(0, { softLimit: null, inUse: null })).toMatchObject({ served: FALLBACK_MAX_CONNECTIONS, source: 'default' });
  });

  it('gives one client network an eighth of the served connections (at least 16), or MAX_CONNECTIONS_PER_CLIENT', () => {
    expect(perClientLimit(0, 17_000)).toBe(2_125);
    expect(perClientLimit(0, 8)).toBe(MIN_CONNECTIONS_PER_CLIENT);
    expect(perClientLimit(40, 17_000)).toBe(40);
  });

  it('exempts only the peers TRUST_PROXY trusts from the per-client limit', () => {
    expect(trustedPeer(false)('127.0.0.1')).toBe(false);
    // A hop count trusts every peer as a proxy (fastify takes the client from X-Forwarded-For of any peer).
    expect(trustedPeer(1)('203.0.113.9')).toBe(true);
    const list = trustedPeer(['10.0.0.0/8', '192.0.2.7', 'fd00::/8']);
    for (const a of ['10.20.30.40', '::ffff:10.20.30.40', '192.0.2.7', 'fd12::1']) expect(list(a), a).toBe(true);
    for (const a of ['11.0.0.1', '192.0.2.8', '::ffff:192.0.2.8', '2001:db8::1', 'not-an-address', '']) expect(list(a), a).toBe(false);
  });
});

describe('shutdown', () => {
  it('closes a keep-alive connection that was busy when close began, once its answer is sent (not after the idle deadline)', async () => {
    // The idle deadline is ten minutes: only the shutdown sweep can close the connection in time.
    const srv = createDualProtocolServer((req, res) => {
      setTimeout(() => res.end('done'), 300);
    }, { ...LIMITS, idleTimeoutMs: 600_000, requestTimeoutMs: 600_000 });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<{ body: string; socket: import('node:net').Socket }>((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port: (srv.address() as AddressInfo).port, path: '/', agent }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ body, socket: req.socket! }));
        });
        req.on('error', reject);
      });
    try {
      // One answered request leaves the connection idle in the agent's pool; the next reuses it.
      await get();
      const inflight = get();
      await new Promise((r) => setTimeout(r, 50));
      const closed = new Promise<string>((resolve) => srv.close(() => resolve('closed')));
      const { body, socket } = await inflight;
      expect(body).toBe('done');
      const socketClosed = socket.destroyed ? Promise.resolve('closed') : new Promise<string>((resolve) => socket.once('close', () => resolve('closed')));
      // Far below the ten-minute idle deadline; a hang fails here instead of at the test timeout.
      const tooLate = new Promise<string>((resolve) => setTimeout(() => resolve('still open after 60 s'), 60_000).unref());
      expect(await Promise.race([Promise.all([closed, socketClosed]).then(() => 'closed'), tooLate])).toBe('closed');
    } finally {
      agent.destroy();
      srv.closeAllConnections();
    }
  });
});
