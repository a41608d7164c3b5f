import http from 'node:http';
import http2 from 'node:http2';
import type { Socket } from 'node:net';

type Handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

// Every HTTP/2 connection without TLS starts with this preface ("prior knowledge", as gRPC
// clients do); no HTTP/1.x request line can start with "PRI", so three bytes decide.
const H2_PREFIX = Buffer.from('PRI');

/**
 * Largest HTTP/1.1 request head. Node's default (16 KiB) would answer a bare 431 to GET
 * /v1/verify?jws=<large token>; with room for a 1 MiB token the service itself answers with a
 * precise 422 problem (tokens over 10 KiB are refused unread). Anything larger still gets 431.
 */
export const MAX_REQUEST_HEAD_BYTES = 1024 * 1024 + 64 * 1024;

/**
 * One listening socket, two protocols: plain HTTP/1.1 (curl with no flags, browsers) and
 * HTTP/2 cleartext (gRPC, Connect over h2c). Each new connection is routed by its first bytes
 * to a node:http or a node:http2 server, both running the same request handler.
 */
export function createDualProtocolServer(handler: Handler): http.Server {
  const h1 = http.createServer({ maxHeaderSize: MAX_REQUEST_HEAD_BYTES }, handler as http.RequestListener);
  const h2 = http2.createServer({}, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
  const sessions = new Set<http2.Http2Session>();
  h2.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  const h1Listeners = h1.listeners('connection') as ((socket: Socket) => void)[];
  h1.removeAllListeners('connection');
  // Connections that have not sent a byte yet (browsers pre-connect speculatively) belong to
  // neither server, so neither would close them: they are tracked here and dropped on close.
  const undecided = new Set<Socket>();
  h1.on('connection', (socket: Socket) => {
    let buffered = Buffer.alloc(0);
    undecided.add(socket);
    socket.once('close', () => undecided.delete(socket));
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const n = Math.min(buffered.length, H2_PREFIX.length);
      const isH2Prefix = buffered.subarray(0, n).equals(H2_PREFIX.subarray(0, n));
      if (isH2Prefix && buffered.length < H2_PREFIX.length) return; // need more bytes to decide
      socket.removeListener('data', onData);
      undecided.delete(socket);
      socket.pause();
      socket.unshift(buffered);
      if (isH2Prefix) h2.emit('connection', socket);
      else for (const l of h1Listeners) l.call(h1, socket);
      process.nextTick(() => socket.resume());
    };
    socket.on('data', onData);
    socket.on('error', () => socket.destroy());
  });
  // Closing the public server also ends HTTP/2 sessions gracefully (GOAWAY after in-flight streams).
  const close = h1.close.bind(h1);
  h1.close = ((cb?: (err?: Error) => void) => {
    for (const s of sessions) s.close();
    for (const socket of undecided) socket.destroy();
    undecided.clear();
    return close(cb);
  }) as typeof h1.close;
  return h1;
}
