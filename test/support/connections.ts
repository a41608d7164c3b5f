// Raw client connections for the listener tests: open a socket, send exactly some bytes, and
// watch whether and how the server ends the connection. Loopback only.
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';

/** Far beyond any deadline the tests configure: only a connection nobody closes reaches it. */
export const CLOSE_BOUND_MS = 20_000;

export interface RawConnection {
  socket: net.Socket;
  /** Everything the server sent so far (latin1). */
  data(): string;
  /** Resolves true once the server ended the connection (FIN or reset), false if still open after boundMs. */
  closedWithin(boundMs?: number): Promise<boolean>;
  /** True once the server has sent FIN or the connection is gone. */
  endedByServer(): boolean;
}

/** `from`: the local address to connect from (another loopback address is another client network). */
export async function rawConnect(port: number, firstBytes?: string | Buffer, from?: string): Promise<RawConnection> {
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true, localAddress: from });
  let received = '';
  let ended = false;
  const gone = new Promise<void>((resolve) => {
    socket.on('end', () => {
      ended = true;
      resolve();
    });
    socket.on('close', () => {
      ended = true;
      resolve();
    });
  });
  socket.on('data', (d: Buffer) => (received += d.toString('latin1')));
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  if (firstBytes !== undefined) socket.write(firstBytes);
  return {
    socket,
    data: () => received,
    endedByServer: () => ended,
    async closedWithin(boundMs = CLOSE_BOUND_MS) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), boundMs)));
      const result = await Promise.race([gone.then(() => true as const), timedOut]);
      clearTimeout(timer);
      return result;
    },
  };
}

/** An HTTP/1.x answer as read off the wire (headers lower-cased; the body as sent, latin1). */
export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * One request written as is on a fresh connection, and the answer once the server closes it (the
 * request should say `Connection: close`). The client never half-closes: node's HTTP server drops
 * the requests in flight of a connection whose client did.
 */
export async function rawExchange(port: number | string, request: string | Buffer): Promise<RawAnswer> {
  const c = await rawConnect(Number(port), request);
  if (!(await c.closedWithin())) {
    c.socket.destroy();
    throw new Error(`the server did not close the connection within ${CLOSE_BOUND_MS} ms`);
  }
  const [head = '', ...rest] = c.data().split('\r\n\r\n');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
  return { status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') };
}

/** Server-side sockets on this port in CLOSE-WAIT (the client closed, the server did not), from /proc/net/tcp{,6}. */
export function closeWaitCount(port: number): number | null {
  let n = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return null;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 4) continue;
      const localPort = parseInt(cols[1]!.split(':')[1] ?? '', 16);
      if (localPort === port && cols[3] === '08') n++;
    }
  }
  return n;
}

/** Polls until fn() is true (it may also answer asynchronously) or the bound passes; returns the last value of fn(). */
export async function eventually(fn: () => boolean | Promise<boolean>, boundMs = CLOSE_BOUND_MS): Promise<boolean> {
  const until = Date.now() + boundMs;
  while (Date.now() < until) {
    if (await fn()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return fn();
}

/** An HTTP/2 cleartext session (prior knowledge) and a promise of its end, true if it ended within the bound. */
export function h2Connect(base: string, settings: http2.Settings = {}) {
  const session = http2.connect(base, { settings });
  session.on('error', () => {});
  const closed = new Promise<void>((resolve) => session.once('close', () => resolve()));
  return {
    session,
    async closedWithin(boundMs = CLOSE_BOUND_MS): Promise<boolean> {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), boundMs)));
      const result = await Promise.race([closed.then(() => true as const), timedOut]);
      clearTimeout(timer);
      return result;
    },
  };
}

/** The bytes a client sends first on an HTTP/2 connection with prior knowledge. */
export const H2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

/** A plain HTTP/1.1 GET on its own new connection; resolves to the raw response text once the server closes or the bound passes. */
export async function rawGet(port: number, path: string, boundMs = CLOSE_BOUND_MS, from?: string): Promise<string> {
  const c = await rawConnect(port, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, from);
  await c.closedWithin(boundMs);
  c.socket.destroy();
  return c.data();
}

/** Status code of a raw HTTP/1.1 response text (0 when there is none). */
export function statusOf(raw: string): number {
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(raw);
  return m ? Number(m[1]) : 0;
}
