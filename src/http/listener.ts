import http from 'node:http';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { DEFAULT_ANSWER_BUDGET_BYTES, type HttpConfig } from '../config.js';
import { addToNetwork, clientNetwork } from '../domain/client-network.js';
import { answerBudget, type AnswerBudget } from './answer-budget.js';
import { clientAddressOf, trustedPeer } from './client-address.js';
import { capRefusal, connectionCap, descriptorUsage, overflowFor, perClientLimit, type ConnectionCap } from './connection-cap.js';
import { answerClientError, closeAfterOurEnd, endWithAnswer, requestTimeoutError, trackResponse, waitingFor } from './socket-answers.js';

type Handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

// Every HTTP/2 connection without TLS starts with this preface ("prior knowledge", as gRPC
// clients do); no HTTP/1.x request line can start with "PRI", so three bytes decide.
const H2_PREFIX = Buffer.from('PRI');

/**
 * Largest HTTP/1.1 request head. Node's default (16 KiB) would answer a bare 431 to GET
 * /v1/verify?jws=<large token>; with room for a 1 MiB token the service itself answers with a
 * precise 422 problem (tokens over 10 KiB are refused unread). Anything larger gets 431.
 */
export const MAX_REQUEST_HEAD_BYTES = 1024 * 1024 + 64 * 1024;

/** Connections beyond the cap get this long (at most) to send the first bytes of the request their 503 answers. */
const OVER_CAPACITY_FIRST_BYTE_MS = 2_000;
/** How often, once closing, keep-alive connections that have finished their request are closed. */
const CLOSE_SWEEP_MS = 100;

/** What the listener holds right now (tests, the start-up log line, operators via the returned server). */
export interface ConnectionStats {
  open: number;
  undecided: number;
  h2Sessions: number;
  cap: ConnectionCap | null;
  /** Connections refused since start: answered 503 (or closed, HTTP/2) beyond the cap, or closed at accept beyond the overflow. */
  refused: { answered: number; dropped: number };
  /** Connections one client network may hold (null until listening). */
  perClient: number | null;
  /** Connections refused beyond their client network's limit: answered 429 (or closed, HTTP/2), or closed at accept. */
  refusedPerClient: { answered: number; dropped: number };
}

export interface DualProtocolServer extends http.Server {
  connectionStats(): ConnectionStats;
  /** Answer bytes held for clients that have not read them (src/http/answer-budget.ts). */
  readonly answerBudget: AnswerBudget;
}

/**
 * One listening socket, two protocols: plain HTTP/1.1 (curl with no flags, browsers) and
 * HTTP/2 cleartext (gRPC, Connect over h2c). Each new connection is routed by its first bytes
 * to a node:http or a node:http2 server, both running the same request handler.
 *
 * Every stage of a connection has a deadline while the service waits on the client
 * (docs/reliability.md "Connections"): the first bytes, an HTTP/1.1 head and whole request, an
 * idle keep-alive connection, an HTTP/2 connection without streams, and an HTTP/2 stream whose
 * body or whose reader stalls. A stream that keeps moving, however long, is never cut. Open
 * connections are capped so that descriptors remain for the database and probes.
 */
export function createDualProtocolServer(handler: Handler, limits: HttpConfig): DualProtocolServer {
  // The answers of every connection served count against one budget (src/http/answer-budget.ts).
  const answers = answerBudget({ limit: limits.answerBudgetBytes ?? DEFAULT_ANSWER_BUDGET_BYTES, clientAddress: clientAddressOf(limits.trustProxy) });
  const h1 = http.createServer({
    maxHeaderSize: MAX_REQUEST_HEAD_BYTES,
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.idleTimeoutMs,
    // How often node checks the head and request deadlines (its default, 30 s, would stretch short ones).
    connectionsCheckingInterval: Math.round(Math.min(5_000, Math.max(50, Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4))),
  }) as DualProtocolServer;
  // Tracked before the application's handler, so that even a response finished synchronously is
  // seen. A connection may have as many requests in flight as an HTTP/2 connection may have
  // streams: node dispatches every request of what it reads at once (about 2,000 small pipelined
  // GETs in one 64 KiB read) and queues their answers for a client that may never read them
  // (measured: one client network pipelining /metrics 1,000 deep on 94 connections had 753 MiB
  // of queued answers in the heap after 43 s, and growing). Beyond it the connection is closed, as HTTP/2 closes one
  // that opens too many streams; its handler never runs.
  const maxInFlight = limits.h2MaxConcurrentStreams;
  h1.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (trackResponse(req, res) > maxInFlight) {
      req.socket.destroy();
      return;
    }
    (handler as http.RequestListener)(req, res);
  });
  // Socket inactivity (no byte moved either way for HTTP_REQUEST_TIMEOUT_MS), and node's
  // keep-alive timeout, are reported here. A response the client stopped reading (data waits to
  // be sent) and an idle keep-alive connection are closed; a stalled request gets the 408 node's
  // head and request deadlines give (whichever notices first); a working handler is left alone.
  h1.timeout = limits.requestTimeoutMs;
  h1.on('timeout', (socket: Socket) => {
    if (socket.writableLength > 0) return socket.destroy();
    const waiting = waitingFor(socket);
    if (waiting === 'client') answerClientError(requestTimeoutError(), socket, limits.requestTimeoutMs);
    else if (waiting === 'idle') socket.destroy();
  });

  // Node's default lets one connection open 2^32-1 streams at once (measured: 50,000 bodies left
  // pending on one connection held 86 MB, every one of them past the connection cap).
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: limits.h2MaxConcurrentStreams } }, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
  const sessions = new Set<http2.Http2Session>();
  h2.on('session', (session) => {
    answers.countAnswersOf(session);
    sessions.add(session);
    watchSession(session, limits);
    session.once('close', () => sessions.delete(session));
  });

  // Resolved when the server starts listening, so that the descriptors the database already
  // holds are counted. Beyond served + overflow, node closes new connections at accept.
  let cap: ConnectionCap | null = null;
  // Connections per client network (never a trusted proxy's), so one client cannot take every
  // served connection: up to perClient served, the next overflowFor(perClient) answered 429, the
  // rest closed at accept. One entry per network with an open connection.
  let perClient: number | null = null;
  const isTrustedPeer = trustedPeer(limits.trustProxy);
  const byNetwork = new Map<string, number>();
  h1.on('listening', () => {
    cap = connectionCap(limits.maxConnections, descriptorUsage());
    h1.maxConnections = cap.served + cap.overflow;
    perClient = perClientLimit(limits.maxConnectionsPerClient, cap.served);
  });
  // Out of descriptors anyway (something else used them up): libuv closes the connection it
  // could not accept; that is no reason to stop the process.
  h1.on('listening', () => h1.on('error', (err: NodeJS.ErrnoException) => {
    if (err.syscall !== 'accept') throw err;
  }));

  const h1Listeners = h1.listeners('connection') as ((socket: Socket) => void)[];
  h1.removeAllListeners('connection');
  let open = 0;
  const refused = { answered: 0, dropped: 0 };
  const refusedPerClient = { answered: 0, dropped: 0 };
  h1.on('drop', () => refused.dropped++);
  // Connections that have not sent enough bytes to choose a protocol belong to neither server,
  // so neither would close them: they are tracked here, have their own deadline, and a client
  // FIN (the server socket is allowHalfOpen) closes them instead of leaving CLOSE-WAIT behind.
  const undecided = new Set<Socket>();
  h1.on('connection', (socket: Socket) => {
    open++;
    const peer = socket.remoteAddress;
    const network = perClient !== null && peer !== undefined && !isTrustedPeer(peer) ? clientNetwork(peer) : null;
    const ofClient = network === null ? 0 : addToNetwork(byNetwork, network, 1);
    socket.once('close', () => {
      open--;
      if (network !== null) addToNetwork(byNetwork, network, -1);
    });
    if (network !== null && ofClient > perClient! + overflowFor(perClient!)) {
      refusedPerClient.dropped++;
      socket.destroy();
      return;
    }
    const overClientLimit = network !== null && ofClient > perClient!;
    closeAfterOurEnd(socket);
    const overCapacity = !overClientLimit && cap !== null && open > cap.served;
    // Where a refusal is counted; null when the connection is served.
    const refusal = overClientLimit ? refusedPerClient : overCapacity ? refused : null;
    let buffered: Buffer = Buffer.alloc(0);
    undecided.add(socket);
    const deadline = setTimeout(() => socket.destroy(), refusal !== null ? Math.min(limits.firstByteTimeoutMs, OVER_CAPACITY_FIRST_BYTE_MS) : limits.firstByteTimeoutMs);
    deadline.unref();
    const onEnd = () => socket.destroy();
    const decided = () => {
      clearTimeout(deadline);
      undecided.delete(socket);
      socket.removeListener('data', onData);
      socket.removeListener('end', onEnd);
    };
    socket.once('close', decided);
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const n = Math.min(buffered.length, H2_PREFIX.length);
      const isH2Prefix = buffered.subarray(0, n).equals(H2_PREFIX.subarray(0, n));
      if (isH2Prefix && buffered.length < H2_PREFIX.length) return; // need more bytes to decide
      decided();
      if (refusal !== null) {
        refusal.answered++;
        // HTTP/1.1 gets a 429 or 503 it can act on; an HTTP/2 client cannot read one and is closed (gRPC: UNAVAILABLE, retried).
        if (isH2Prefix) socket.destroy();
        // HTTP/1.1: problem+json, or an OTLP/HTTP export's google.rpc.Status (capRefusal).
        else if (overClientLimit) endWithAnswer(socket, capRefusal(buffered, 'rate_limited', `this client network already holds ${perClient} open connections (MAX_CONNECTIONS_PER_CLIENT); reuse them, or retry once some are closed`));
        else endWithAnswer(socket, capRefusal(buffered, 'unavailable', 'the service has too many open connections; retry shortly'));
        return;
      }
      socket.pause();
      socket.unshift(buffered);
      if (isH2Prefix) {
        socket.once('end', endOurSide);
        h2.emit('connection', socket);
      }
      else {
        answers.countAnswersOf(socket);
        for (const l of h1Listeners) l.call(h1, socket);
      }
      process.nextTick(() => socket.resume());
    };
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('error', () => socket.destroy());
  });

  (h1 as { answerBudget: AnswerBudget }).answerBudget = answers.budget;
  h1.connectionStats = () => ({ open, undecided: undecided.size, h2Sessions: sessions.size, cap, refused: { ...refused }, perClient, refusedPerClient: { ...refusedPerClient } });

  // Closing the public server also ends HTTP/2 sessions gracefully (GOAWAY after in-flight streams).
  // node closes the keep-alive connections idle at that moment, but a connection busy with a
  // request then would sit idle until HTTP_IDLE_TIMEOUT_MS after its answer and hold shutdown
  // past a supervisor's patience: until the server has closed, idle ones are swept often.
  const close = h1.close.bind(h1);
  h1.close = ((cb?: (err?: Error) => void) => {
    for (const s of sessions) s.close();
    for (const socket of undecided) socket.destroy();
    undecided.clear();
    const sweep = setInterval(() => h1.closeIdleConnections(), CLOSE_SWEEP_MS);
    sweep.unref();
    h1.once('close', () => clearInterval(sweep));
    return close(cb);
  }) as typeof h1.close;
  return h1;
}

/**
 * An HTTP/2 client's FIN (or a client that destroyed its connection): our side ends too, as node's
 * own HTTP/2 server does, and the session closes with the socket. The listening socket is
 * allowHalfOpen (for HTTP/1.1 clients that half-close after a request), and node's HTTP/2 session
 * does not end a half-open socket while a stream is open: a client that vanished with a request
 * body pending left its session, its streams and their buffered bodies (4 MiB each for OTLP),
 * and its slot under MAX_CONNECTIONS, for HTTP_REQUEST_TIMEOUT_MS. Module level: one function for
 * every connection.
 */
function endOurSide(this: Socket): void {
  this.end();
}

/**
 * After our end of an HTTP/2 stream went out, how long the rest of the client's body may stall
 * before the stream is reset: the answer is complete, so nothing waits on that body.
 */
const DISCARD_STALL_MS = 1_000;

/**
 * An HTTP/2 stream's deadline passed (`this`): reset it when it waits on the client, its body not
 * ended or its answer waiting for the client to read it. A stream whose answer went out whole
 * is reset with NO_ERROR ("stop sending, the response is complete", RFC 9113 section 8.1), which
 * clients take as a clean end; any other with CANCEL. Module level: one function for every
 * stream (test/hot-path-names.test.ts).
 */
function cutIfWaitingOnClient(this: http2.ServerHttp2Stream): void {
  if (this.destroyed) return;
  const bodyPending = !this.state.remoteClose;
  const readerStalled = this.writableLength > 0;
  if (!bodyPending && !readerStalled) return;
  const answered = this.state.localClose === 1 && !readerStalled;
  this.close(answered ? http2.constants.NGHTTP2_NO_ERROR : http2.constants.NGHTTP2_CANCEL);
}

/**
 * Deadlines of one HTTP/2 connection. The session is idle while it has no open stream (PINGs
 * and SETTINGS do not count): after HTTP2_SESSION_IDLE_TIMEOUT_MS it is closed with GOAWAY. A
 * stream is reset when, for HTTP_REQUEST_TIMEOUT_MS, nothing moves on it while it waits on the
 * client: the client's body has not ended, or response data waits for the client to read it.
 * Silence while a handler works is not the client's stall and is never cut.
 */
function watchSession(session: http2.ServerHttp2Session, limits: HttpConfig): void {
  let streams = 0;
  let idle: NodeJS.Timeout | undefined;
  const arm = () => {
    // GOAWAY, then node ends the socket; a peer that keeps its side open is closed by closeAfterOurEnd.
    idle = setTimeout(() => session.close(), limits.h2SessionIdleTimeoutMs);
    idle.unref();
  };
  session.on('stream', (stream: http2.ServerHttp2Stream) => {
    streams++;
    clearTimeout(idle);
    stream.once('close', () => {
      if (--streams === 0 && !session.closed && !session.destroyed) arm();
    });
    // A response that ended while the client is still sending (a gRPC error such as
    // RESOURCE_EXHAUSTED for an oversize message, answered before the body was read) would leave
    // the stream half-open: nobody reads the rest of the body, so flow control stops the client,
    // and the stream (with its session, and a graceful shutdown) waits for ever. Once our end of
    // the stream has gone out, the rest of the body is read and discarded so that the client can
    // finish and the stream closes normally. (RST_STREAM at once would be allowed, but node and
    // connect-es clients then report "Premature close" instead of the status they were sent.)
    // A client that stops sending without ending its side (connect-node's gRPC client after an
    // early error does) would still hold the stream, its session and a graceful shutdown for
    // HTTP_REQUEST_TIMEOUT_MS: once its body has stalled DISCARD_STALL_MS, long after it read our
    // answer, the stream is reset with NO_ERROR (cutIfWaitingOnClient).
    stream.once('finish', () => {
      let tries = 0;
      const check = () => {
        if (stream.destroyed || stream.readableEnded || stream.state.remoteClose) return;
        if (stream.closed || stream.state.localClose === 1 || stream.sentTrailers !== undefined) {
          stream.removeAllListeners('data');
          stream.on('data', () => {});
          stream.resume();
          stream.setTimeout(Math.min(DISCARD_STALL_MS, limits.requestTimeoutMs));
          return;
        }
        // Trailers follow 'finish' shortly: look again, a bounded number of times.
        if (++tries < 100) setTimeout(check, 20).unref();
      };
      setImmediate(check);
    });
    // A listener for every time the deadline passes, not only the first: node arms the stream's
    // timer again on any activity, while a callback given to setTimeout would listen once, so a
    // deadline that passed while a handler worked (nothing to cut) left a later stall unseen.
    stream.setTimeout(limits.requestTimeoutMs);
    stream.on('timeout', cutIfWaitingOnClient);
  });
  session.once('close', () => clearTimeout(idle));
  arm();
}
