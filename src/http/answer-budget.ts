import http from 'node:http';
import http2 from 'node:http2';
import type net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { ConnectError } from '@connectrpc/connect';
import { codeToHttpStatus, errorToJson } from '@connectrpc/connect/protocol-connect';
import { addToNetwork, clientNetwork } from '../domain/client-network.js';
import { PROBLEM_CONTENT_TYPE, PROBLEMS, problemBody } from '../errors.js';
import { sendProblemToCaller } from './problem.js';
import { rpcProtocolOf, withRetryInfo } from './rpc-errors.js';

// How many bytes of answers the process may hold for clients that do not read them
// (HTTP_ANSWER_BUDGET_BYTES), and one client network an eighth of them (docs/reliability.md
// "Answers nobody reads"). An answer is built in memory and written into node's stream and
// socket buffers whether or not the client reads it: an HTTP/2 client that announces a receive
// window of 0, or an HTTP/1.1 client that pipelines requests and never reads, keeps every
// answer's bytes in the process until the stream or connection ends. Measured before this bound
// (2026-11-29): one client network, 92 HTTP/2 connections of 100 streams each, took the service
// from 622 to 1,401 MB of RSS with /openapi.json (80 KB) and from 593 to 1,768 MB with 608 A2A
// GetTask answers of 1 MiB, held for HTTP_REQUEST_TIMEOUT_MS and longer.
//
// node's response classes are patched once (answerBudget), and the listener tags every
// connection it serves with its budget (countAnswersOf). An answer of at least COUNT_FROM_BYTES
// on such a connection counts against the budget:
// - one whose length is stated when its head is written (every fastify answer: its payload is
//   built whole, and fastify writes it to HTTP/2 in 64 KiB pieces as the client reads, keeping
//   the rest meanwhile) counts that length from its head until the response closes;
// - any other write of at least COUNT_FROM_BYTES (a Connect unary answer, a streamed message, an
//   SSE event) counts from the write until its bytes are handed on (its callback: to the socket,
//   or within HTTP/2 flow control's window) or the response closes.
// Smaller answers (the trust read, pre-flight, gate and report answers) cost a comparison. A
// string counted is written as the Buffer of its bytes: node copies a string into storage of
// three times its length to write it, which a client that does not read then keeps. A response
// marked shared (sharedAnswer: a cached Buffer written to every reader by reference, the bundle,
// the discovery documents) is held once whatever the number of readers and is not counted.
//
// An answer that would pass the process's budget or its client network's share is not sent: in
// its place a 503 or 429 with Retry-After (problem+json, or the Connect error of a Connect unary
// call) while its head is not written, else the HTTP/2 stream is reset (ENHANCE_YOUR_CALM) or the
// HTTP/1.1 connection closed. A network that holds nothing may always have one answer, however
// large, and so may the process: no answer is too large to be sent. A request from a network that
// already holds its share is answered 429 before it is handled (installAnswerAdmission).

/** Answers and writes smaller than this are not counted: the hot paths' answers are a few hundred bytes to 2 KB. */
export const COUNT_FROM_BYTES = 4 * 1024;

export interface AnswerBudget {
  /** The process's budget in bytes. */
  readonly limit: number;
  /** One client network's share. */
  readonly perClient: number;
  /** Answer bytes counted now, and how many client networks hold some. */
  held(): { total: number; networks: number };
  /** Answers not sent because they would pass the process's budget or the network's share, and requests refused before they were handled. */
  refused(): { total: number; perClient: number; admission: number };
  /** True while no answer is counted (the admission check's fast path). */
  idle(): boolean;
  /** Whether a request of this client network may be handled: false (and counted) when the network holds its share. */
  admits(network: string): boolean;
}

interface State {
  limit: number;
  perClient: number;
  total: number;
  byNetwork: Map<string, number>;
  refused: { total: number; perClient: number; admission: number };
  clientAddress: (req: http.IncomingMessage) => string | undefined;
}

const kState = Symbol('answerBudget');
const kHeld = Symbol('answerBytesHeld');
const kNetwork = Symbol('answerNetwork');
/** The answer's length was counted at its head: its writes are not counted again. */
const kStated = Symbol('answerStated');
/** Not counted at all (sharedAnswer). */
const kShared = Symbol('answerShared');
/** Refused: later writes go nowhere. */
const kRefused = Symbol('answerRefused');
interface Counted {
  [kState]?: State;
  [kHeld]?: number;
  [kNetwork]?: string;
  [kStated]?: boolean;
  [kShared]?: boolean;
  [kRefused]?: boolean;
}
type AnyResponse = (http.ServerResponse | http2.Http2ServerResponse) & Counted;
type Callback = (err?: Error | null) => void;
type Over = 'total' | 'perClient';

/**
 * Marks a response whose body is a cached Buffer written to every reader by reference (held once,
 * however many readers do not read it): it is not counted. Call before sending.
 */
export function sharedAnswer(res: http.ServerResponse | http2.Http2ServerResponse): void {
  (res as AnyResponse)[kShared] = true;
}

/** Bytes a chunk may be: a string's length (at least a third of its bytes), a buffer's bytes; 0 for anything else. */
function sizeOf(chunk: unknown): number {
  if (typeof chunk === 'string') return chunk.length;
  if (chunk instanceof Uint8Array) return chunk.byteLength;
  return 0;
}

function networkOf(s: State, res: AnyResponse): string {
  let n = res[kNetwork];
  if (n === undefined) {
    n = clientNetwork(s.clientAddress(res.req as unknown as http.IncomingMessage) ?? '');
    res[kNetwork] = n;
  }
  return n;
}

/** Why `n` more bytes cannot be held for `network` now, or null when they can. */
function overBy(s: State, network: string, n: number): Over | null {
  if (s.total > 0 && s.total + n > s.limit) return 'total';
  const held = s.byNetwork.get(network) ?? 0;
  if (held > 0 && held + n > s.perClient) return 'perClient';
  return null;
}

/**
 * Whether the response's stream or connection is already gone: its 'close' has been emitted (or
 * is about to be), so nothing it writes is held, and nothing may be counted for it.
 */
function gone(res: AnyResponse): boolean {
  if ('stream' in res) return res.stream.destroyed || res.stream.closed;
  const socket = res.socket ?? res.req.socket;
  return socket === null || socket.destroyed;
}

/** Counts `n` bytes for the response, or says why not (and counts the refusal). */
function take(s: State, res: AnyResponse, n: number): Over | null {
  if (gone(res)) return null;
  const network = networkOf(s, res);
  const over = overBy(s, network, n);
  if (over !== null) {
    s.refused[over]++;
    return over;
  }
  s.total += n;
  addToNetwork(s.byNetwork, network, n);
  if (res[kHeld] === undefined) {
    res[kHeld] = 0;
    res[kState] = s;
    res.once('close', releaseAll);
  }
  res[kHeld]! += n;
  return null;
}

function release(s: State, res: AnyResponse, n: number): void {
  const k = Math.min(n, res[kHeld] ?? 0);
  if (k <= 0) return;
  res[kHeld]! -= k;
  s.total -= k;
  addToNetwork(s.byNetwork, res[kNetwork]!, -k);
}

/** The response closed (sent, or the client left): what it still holds is released. Module level: one function for every response. */
function releaseAll(this: AnyResponse): void {
  release(this[kState]!, this, this[kHeld] ?? 0);
}

const OVER_BUDGET = 'the service holds as many unread answers as it may (HTTP_ANSWER_BUDGET_BYTES); retry shortly';
const OVER_SHARE =
  "this client network holds as many unread answers as it may (its share of HTTP_ANSWER_BUDGET_BYTES); read the answers it asked for, or retry once they are read or closed";

/** Headers of the answer that a refusal keeps (the hooks' request id, interface version, CORS, rate limits). */
const KEPT = /^(x-request-id|x-interface-version|vary|access-control-|ratelimit)/;

/**
 * The refusal sent in the answer's place, its head not written yet: 503 or 429 with Retry-After,
 * as the Connect error of a Connect unary call, problem+json otherwise. `given`: the headers
 * passed to writeHead, if any.
 */
function refusalAnswer(res: AnyResponse, over: Over, given: http.OutgoingHttpHeaders | undefined): { status: number; headers: http.OutgoingHttpHeaders; body: string } {
  const problem = over === 'total' ? 'unavailable' : 'rate_limited';
  const detail = over === 'total' ? OVER_BUDGET : OVER_SHARE;
  const headers: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries({ ...res.getHeaders(), ...given })) if (v !== undefined && KEPT.test(k.toLowerCase())) headers[k.toLowerCase()] = v;
  for (const k of res.getHeaderNames()) res.removeHeader(k);
  headers['retry-after'] = '2';
  headers['cache-control'] = 'no-store';
  const req = res.req as unknown as { headers: http.IncomingHttpHeaders; url: string };
  let status: number;
  let body: string;
  if (rpcProtocolOf({ headers: req.headers, url: req.url ?? '' }) === 'connect') {
    const err = withRetryInfo(new ConnectError(detail, PROBLEMS[problem].code, { 'retry-after': '2' }));
    status = codeToHttpStatus(err.code);
    body = JSON.stringify({ ...errorToJson(err, undefined), message: detail });
    headers['content-type'] = 'application/json';
  } else {
    status = PROBLEMS[problem].status;
    body = JSON.stringify(problemBody(problem, detail, String(headers['x-request-id'] ?? '')));
    headers['content-type'] = PROBLEM_CONTENT_TYPE;
  }
  headers['content-length'] = String(Buffer.byteLength(body));
  return { status, headers, body };
}

/** The answer is not sent and its head is already written: the HTTP/2 stream is reset, the HTTP/1.1 connection closed. */
function cut(res: AnyResponse): void {
  res[kRefused] = true;
  if ('stream' in res) {
    if (!res.stream.destroyed) res.stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    return;
  }
  (res.socket ?? res.req.socket)?.destroy();
}

function refusedError(): Error {
  return Object.assign(new Error('the answer was not sent: HTTP_ANSWER_BUDGET_BYTES'), { code: 'ERR_STREAM_DESTROYED' });
}

/** The stated length of an answer from writeHead's arguments (status, [reason], [headers]), when it is to be counted. */
function statedLength(res: AnyResponse, reasonOrHeaders: unknown, headers: unknown): number {
  const h = (typeof reasonOrHeaders === 'object' && reasonOrHeaders !== null ? reasonOrHeaders : headers) as Record<string, unknown> | undefined;
  // An array of headers (the fast paths') is never a large answer; a plain object is fastify's.
  if (h === undefined || h === null || Array.isArray(h)) return 0;
  const n = Number(h['content-length']);
  if (!(n >= COUNT_FROM_BYTES) || res.req.method === 'HEAD') return 0;
  return n;
}

/** The budget of the connection a response belongs to: an HTTP/1.1 socket or an HTTP/2 session tagged by countAnswersOf. */
const kBudget = Symbol('answerBudgetOfConnection');
type Tagged = { [kBudget]?: State };

function stateOf(res: AnyResponse): State | undefined {
  if ('stream' in res) return (res.stream.session as (http2.Http2Session & Tagged) | undefined)?.[kBudget];
  return ((res.socket ?? res.req.socket) as (net.Socket & Tagged) | null)?.[kBudget];
}

/**
 * The original methods of node's response classes, which the counting ones call. Node's classes
 * are patched once, not subclassed: a subclass of http.ServerResponse (a function-style
 * constructor) cost 3.6 µs of CPU per request, a third of a bare answer's (measured with a bare
 * node server: 11.6 µs per request, 15.3 with an empty `class extends`), where the patched
 * methods cost one property read and a comparison for an answer of no budget or under
 * COUNT_FROM_BYTES. Responses of servers that count nothing (tests' fixture servers) pass on.
 */
interface Originals {
  writeHead(this: AnyResponse, status: number, reasonOrHeaders?: unknown, headers?: unknown): unknown;
  write(this: AnyResponse, chunk: unknown, encoding?: unknown, cb?: unknown): boolean;
  end(this: AnyResponse, chunk?: unknown, encoding?: unknown, cb?: unknown): unknown;
}
let originals: { h1: Originals; h2: Originals } | null = null;

function patch(proto: Originals): Originals {
  const o: Originals = { writeHead: proto.writeHead, write: proto.write, end: proto.end };
  proto.writeHead = function writeHead(this: AnyResponse, status: number, reasonOrHeaders?: unknown, headers?: unknown) {
    if (this[kRefused] || !head(this, o, reasonOrHeaders, headers)) return this;
    return o.writeHead.call(this, status, reasonOrHeaders, headers);
  };
  proto.write = function write(this: AnyResponse, data: unknown, encoding?: unknown, cb?: unknown) {
    if (this[kRefused]) return refusedWrite(encoding, cb);
    return chunk(this, o, data, encoding, cb, false) ?? o.write.call(this, data, encoding, cb);
  };
  proto.end = function end(this: AnyResponse, data?: unknown, encoding?: unknown, cb?: unknown) {
    if (this[kRefused]) return refusedEnd(this, data, encoding, cb);
    if (chunk(this, o, data, encoding, cb, true) !== undefined) return this;
    return o.end.call(this, data, encoding, cb);
  };
  return o;
}

/** writeHead: an answer of stated length is counted here, or refused in its place. Returns false when refused. */
function head(res: AnyResponse, o: Originals, reasonOrHeaders: unknown, headers: unknown): boolean {
  if (res[kShared]) return true;
  const n = statedLength(res, reasonOrHeaders, headers);
  if (n === 0) return true;
  const s = stateOf(res);
  if (s === undefined) return true;
  const over = take(s, res, n);
  if (over === null) {
    res[kStated] = true;
    return true;
  }
  const given = (typeof reasonOrHeaders === 'object' ? reasonOrHeaders : headers) as http.OutgoingHttpHeaders | undefined;
  refuseInPlace(res, o, over, given);
  return false;
}

function refuseInPlace(res: AnyResponse, o: Originals, over: Over, given: http.OutgoingHttpHeaders | undefined): void {
  res[kRefused] = true;
  const a = refusalAnswer(res, over, given);
  o.writeHead.call(res, a.status, a.headers);
  endWith(res, o, Buffer.from(a.body), undefined, undefined);
}

/** write or end of a chunk: counted, refused, or passed on (returns undefined). */
function chunk(res: AnyResponse, o: Originals, chunk: unknown, encoding: unknown, cb: unknown, ending: boolean): boolean | undefined {
  if (sizeOf(chunk) < COUNT_FROM_BYTES || res[kShared]) return undefined;
  // Counted at its head: only a string is taken here, to go on as its bytes (node would copy it into three times its length).
  if (res[kStated] && typeof chunk !== 'string') return undefined;
  const s = stateOf(res);
  // A HEAD answer has no body: node drops what is written.
  if (s === undefined || res.req.method === 'HEAD') return undefined;
  const [enc, done] = typeof encoding === 'function' ? [undefined, encoding as Callback] : [encoding as BufferEncoding | undefined, cb as Callback | undefined];
  const bytes = typeof chunk === 'string' ? Buffer.from(chunk, enc ?? 'utf8') : (chunk as Uint8Array);
  if (res[kStated]) {
    if (!ending) return o.write.call(res, bytes, done);
    endWith(res, o, bytes, undefined, done);
    return true;
  }
  const n = bytes.byteLength;
  const over = take(s, res, n);
  if (over !== null) {
    if (!res.headersSent) refuseInPlace(res, o, over, undefined);
    else cut(res);
    if (done) process.nextTick(done, ending ? undefined : refusedError());
    return false;
  }
  const handedOn: Callback = (err) => {
    release(s, res, n);
    if (!ending) done?.(err);
  };
  if (!ending) return o.write.call(res, bytes, handedOn);
  endWith(res, o, bytes, handedOn, done);
  return true;
}

/**
 * end(bytes): HTTP/1.1's end writes its last chunk itself; HTTP/2's compatibility end() calls
 * this.write(), which would count the chunk again, so there the chunk is written, then ended.
 * `written`: called once the chunk is handed on; `done`: once the answer is.
 */
function endWith(res: AnyResponse, o: Originals, bytes: Uint8Array, written: Callback | undefined, done: Callback | undefined): void {
  if ('stream' in res) {
    o.write.call(res, bytes, written ?? noop);
    o.end.call(res, undefined, done);
    return;
  }
  o.end.call(res, bytes, () => {
    written?.();
    done?.();
  });
}

function noop(): void {}

/**
 * One budget for the answers of the connections tagged with `countAnswersOf` (an HTTP/1.1
 * socket, an HTTP/2 session: the listener tags every connection it serves). The first call
 * patches node's response classes (once per process).
 */
export function answerBudget(opts: { limit: number; clientAddress: (req: http.IncomingMessage) => string | undefined }): {
  budget: AnswerBudget;
  countAnswersOf(connection: net.Socket | http2.Http2Session): void;
} {
  originals ??= {
    h1: patch(http.ServerResponse.prototype as unknown as Originals),
    h2: patch(http2.Http2ServerResponse.prototype as unknown as Originals),
  };
  const s: State = {
    limit: opts.limit,
    perClient: Math.max(Math.floor(opts.limit / 8), 1),
    total: 0,
    byNetwork: new Map(),
    refused: { total: 0, perClient: 0, admission: 0 },
    clientAddress: opts.clientAddress,
  };
  return {
    countAnswersOf: (connection) => {
      (connection as Tagged)[kBudget] = s;
    },
    budget: {
      limit: s.limit,
      perClient: s.perClient,
      held: () => ({ total: s.total, networks: s.byNetwork.size }),
      refused: () => ({ ...s.refused }),
      idle: () => s.total === 0,
      admits: (network) => {
        if ((s.byNetwork.get(network) ?? 0) < s.perClient) return true;
        s.refused.admission++;
        return false;
      },
    },
  };
}

/** Writes after a refusal go nowhere (the answer was replaced, or its stream or connection is gone): their callbacks say so. */
function refusedWrite(encoding: unknown, cb: unknown): boolean {
  const done = typeof encoding === 'function' ? encoding : cb;
  if (typeof done === 'function') process.nextTick(done as Callback, refusedError());
  // true: a writer waiting for 'drain' would wait for ever; the response's close ends it.
  return true;
}

function refusedEnd<T>(res: T, chunk: unknown, encoding: unknown, cb: unknown): T {
  const done = typeof chunk === 'function' ? chunk : typeof encoding === 'function' ? encoding : cb;
  if (typeof done === 'function') process.nextTick(done as Callback);
  return res;
}

/**
 * Requests from a client network that already holds its share of unread answers are answered
 * 429 with Retry-After, in their protocol, before they are handled: their answers could not be
 * sent anyway. While no answer is held this is one comparison per request.
 */
export function installAnswerAdmission(app: FastifyInstance, budget: AnswerBudget): void {
  app.addHook('onRequest', (req, reply, done) => {
    if (budget.idle() || budget.admits(clientNetwork(req.ip))) return done();
    const headers: Record<string, string> = { 'retry-after': '2' };
    // A body stays unread: on HTTP/1.1 the connection ends with the answer.
    if (req.raw.httpVersionMajor === 1) headers.connection = 'close';
    sendProblemToCaller(req, reply, 'rate_limited', OVER_SHARE, headers);
  });
}
