// Answers written straight onto a connection, outside any request handler: requests node's HTTP
// parser refuses (malformed, too large, too slow), a stray HTTP/2 preface on an HTTP/1.1
// connection, and connections beyond the cap. Each is problem+json like every other error, is
// written only after the responses the client is still owed, and ends the connection.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { INTERFACE_VERSION } from '../config.js';
import { PROBLEMS, PROBLEM_CONTENT_TYPE, problemBody, type ProblemCode } from '../errors.js';

/**
 * How long a connection we answered and ended may stay open while the client reads the answer.
 * Meanwhile whatever it still sends is read and dropped: closing with unread bytes would make
 * the kernel reset the connection, and a reset can destroy the answer before the client reads it.
 */
export const LINGER_MS = 2_000;

/** What this module knows of one HTTP/1.1 connection (one object per connection, not per request). */
interface ConnectionState {
  /** Responses not closed yet (pipelined requests queue); `res.req` is their request. */
  readonly pending: Set<ServerResponse>;
  /** Bytes read from the connection when its last response closed: more since then is a next request starting. */
  readAtLastResponse: number;
}
const connections = new WeakMap<Socket, ConnectionState>();
/** Connections already answered here: node's parser reports the same error again for every later chunk. */
const answered = new WeakSet<Socket>();

/** One listener function for every response (no closure per request: this runs on every request). */
function responseClosed(this: ServerResponse): void {
  const socket = this.req.socket as Socket | null;
  const state = socket ? connections.get(socket) : undefined;
  if (!state) return;
  state.pending.delete(this);
  state.readAtLastResponse = socket!.bytesRead;
}

/**
 * Called for every HTTP/1.1 request before the application's handler: returns how many responses
 * its connection now owes (pipelined requests queue), this one included.
 */
export function trackResponse(req: IncomingMessage, res: ServerResponse): number {
  const socket = req.socket;
  let state = connections.get(socket);
  if (!state) connections.set(socket, (state = { pending: new Set(), readAtLastResponse: 0 }));
  state.pending.add(res);
  res.on('close', responseClosed);
  return state.pending.size;
}

/**
 * What an HTTP/1.1 connection is waiting for: the client's request (head or body still
 * arriving), the service (a handler is working on a complete request), or nothing (idle
 * keep-alive between requests).
 */
export function waitingFor(socket: Socket): 'client' | 'service' | 'idle' {
  const state = connections.get(socket);
  if (state && state.pending.size > 0) {
    for (const res of state.pending) if (!res.req.complete) return 'client';
    return 'service';
  }
  return socket.bytesRead > (state?.readAtLastResponse ?? 0) ? 'client' : 'idle';
}

/** The error node's own request deadlines report, for a stall found by the inactivity timer. */
export function requestTimeoutError(): NodeJS.ErrnoException {
  return Object.assign(new Error('request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
}

/** The head of a complete HTTP/1.1 response that closes the connection, blank line included. */
function rawHead(status: number, contentType: string, length: number, requestId: string, headers: Record<string, string>): string {
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}`,
    `Content-Type: ${contentType}`,
    `Content-Length: ${length}`,
    `X-Request-Id: ${requestId}`,
    `X-Interface-Version: ${INTERFACE_VERSION}`,
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    'Connection: close',
  ];
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** A complete HTTP/1.1 problem+json response that closes the connection. */
export function rawProblem(code: ProblemCode, detail: string, headers: Record<string, string> = {}): string {
  const requestId = randomUUID();
  const body = JSON.stringify(problemBody(code, detail, requestId));
  return rawHead(PROBLEMS[code].status, PROBLEM_CONTENT_TYPE, Buffer.byteLength(body), requestId, headers) + body;
}

/** A complete HTTP/1.1 response with another body (a protocol's own error body) that closes the connection. */
export function rawResponse(status: number, contentType: string, body: string | Uint8Array, headers: Record<string, string> = {}): Buffer {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  return Buffer.concat([Buffer.from(rawHead(status, contentType, bytes.byteLength, randomUUID(), headers), 'latin1'), bytes]);
}

/**
 * Writes the answer and ends the connection; whatever the client still sends is read and
 * dropped until it closes too, or LINGER_MS after our end (closeAfterOurEnd, for every connection).
 */
export function endWithAnswer(socket: Socket, answer: string | Uint8Array): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  socket.on('data', () => {});
  socket.resume();
  socket.end(answer);
}

/**
 * Connections are allowHalfOpen (a client may half-close after its request), so after the
 * service ends its side the descriptor stays open until the client ends its own. A client that
 * never does is closed LINGER_MS after our end: no connection outlives both sides' intent.
 */
export function closeAfterOurEnd(socket: Socket): void {
  socket.once('finish', () => {
    const linger = setTimeout(() => socket.destroy(), LINGER_MS);
    linger.unref();
    socket.once('close', () => clearTimeout(linger));
  });
}

// Errors of the connection itself: nobody is left to read an answer.
const TRANSPORT_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED']);

function answerFor(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return rawProblem('request_timeout', 'the request did not arrive in time (HTTP_HEADERS_TIMEOUT_MS for the head, HTTP_REQUEST_TIMEOUT_MS for the whole request)');
    case 'HPE_HEADER_OVERFLOW':
      return rawProblem('headers_too_large', 'the request head is larger than this service accepts');
    case 'HPE_PAUSED_H2_UPGRADE':
      return rawProblem('invalid_argument', 'an HTTP/2 connection preface arrived on an HTTP/1.1 connection; HTTP/2 (gRPC, h2c) must open a new connection that starts with the preface');
    default:
      return rawProblem('invalid_argument', `the request is malformed (rejected by the HTTP parser: ${err.code ?? 'parse error'})`);
  }
}

/**
 * fastify's clientErrorHandler: node's HTTP/1.1 parser refused what the client sent, or a
 * request deadline passed. Requests parsed before the bad bytes (pipelining) still get their
 * responses first, in order; then the error is answered and the connection ends. A response that
 * never finishes does not hold the connection: after `waitMs` it is closed without an answer.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Socket, waitMs: number): void {
  if (answered.has(socket)) return;
  answered.add(socket);
  if (!socket.writable || TRANSPORT_ERRORS.has(err.code ?? '')) {
    socket.destroy();
    return;
  }
  const answer = answerFor(err);
  // Only complete requests are owed a response; an incomplete one is the request this answer refuses.
  const owed = [...(connections.get(socket)?.pending ?? [])].filter((res) => res.req.complete);
  if (owed.length === 0) {
    endWithAnswer(socket, answer);
    return;
  }
  let left = owed.length;
  const giveUp = setTimeout(() => socket.destroy(), waitMs);
  giveUp.unref();
  socket.once('close', () => clearTimeout(giveUp));
  for (const res of owed) {
    res.once('close', () => {
      if (--left > 0) return;
      clearTimeout(giveUp);
      endWithAnswer(socket, answer);
    });
  }
}
