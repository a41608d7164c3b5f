// The Connect plugin for fastify: @connectrpc/connect's router and protocol handlers, mounted on
// fastify routes by a thinner adapter than @connectrpc/connect-fastify (issue 22, item 4).
//
// What the stock adapter (connect-fastify over connect-node's universalRequestFromNodeRequest /
// universalResponseToNodeResponse) costs per unary call, from `npm run bench:profile --
// connect-json` (docs/performance.md "Connect and gRPC unary"):
// - an AbortController per request that is aborted when the response closes, also after a normal
//   finish; abort() without a reason builds a DOMException (stack trace included): about 6% of the
//   main thread alone, plus the linked controller and listener churn it triggers in the handler;
// - the request body read through the stream's async iterator (listeners, promises) even for a
//   unary message whose length the Content-Length header states;
// - the response written head, chunk and end as separate chunked writes: two or three socket
//   writes for one small unary answer.
// This adapter keeps every protocol decision in the library (router, handlers, interceptors,
// codecs, compression, limits, errors) and changes only how bytes move between node:http and the
// universal handler:
// - the signal aborts only when the call really ends early (the client went away before the answer
//   was finished, a request error, an HTTP/2 reset), with a ConnectError saying so; over HTTP/1.1
//   it is the connection's (one controller per connection, not per call);
// - a body with a Content-Length of at most readMaxBytes is read with plain 'data' events into one
//   chunk; anything else (chunked, larger: the handler answers resource_exhausted) streams as before;
// - a Connect unary answer (application/json or application/proto, no trailers) is written with a
//   Content-Length in one end(); streaming, gRPC and gRPC-Web answers go through connect-node's
//   universalResponseToNodeResponse unchanged.
import { setMaxListeners } from 'node:events';
import type http from 'node:http';
import type http2 from 'node:http2';
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ConnectRouterOptions, type ContextValues } from '@connectrpc/connect';
import type { UniversalServerRequest, UniversalServerResponse } from '@connectrpc/connect/protocol';
import * as protoConnect from '@connectrpc/connect/protocol-connect';
import * as protoGrpc from '@connectrpc/connect/protocol-grpc';
import * as protoGrpcWeb from '@connectrpc/connect/protocol-grpc-web';
import { compressionBrotli, compressionGzip, universalResponseToNodeResponse } from '@connectrpc/connect-node';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { growBodyReservation, type BodyBudgetRouteConfig } from './body-budget.js';
import { retryInfoOnRefusals, rpcProtocolOf, sendRpcProblem, withRetryInfo } from './rpc-errors.js';

export interface ConnectPluginOptions extends ConnectRouterOptions {
  routes: (router: ConnectRouter) => void;
  contextValues?: (req: FastifyRequest) => ContextValues;
}

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Fastify plugin: every procedure of `opts.routes` on its Connect/gRPC/gRPC-Web path. */
export function connectPlugin(instance: FastifyInstance, opts: ConnectPluginOptions, done: (err?: Error) => void): void {
  const readMaxBytes = opts.readMaxBytes ?? 0xffffffff;
  // Around every other interceptor: a refusal with Retry-After also carries google.rpc.RetryInfo,
  // the retry delay gRPC clients read (src/http/rpc-errors.ts).
  const interceptors = [retryInfoOnRefusals(), ...(opts.interceptors ?? [])];
  const router = createConnectRouter({ ...opts, interceptors, acceptCompression: opts.acceptCompression ?? [compressionGzip, compressionBrotli] });
  // Each route states the largest message its service reads (a service may raise the router's
  // readMaxBytes, as OTLP/gRPC does), so the request body budget (src/http/body-budget.ts)
  // reserves what such a call may hold.
  const serviceMaxBytes = new Map<string, number>();
  const service = router.service.bind(router);
  router.service = ((desc, impl, options) => {
    if (options?.readMaxBytes !== undefined) serviceMaxBytes.set(desc.typeName, options.readMaxBytes);
    return service(desc, impl, options);
  }) as typeof router.service;
  opts.routes(router);
  // The body is the adapter's to read (the handlers take it as bytes): fastify parses nothing
  // for the content types Connect serves, in this plugin's scope only.
  const noop = (_req: unknown, _payload: unknown, next: (err: Error | null, body?: unknown) => void) => next(null, undefined);
  instance.addContentTypeParser(
    [protoConnect.contentTypeUnaryJson, protoConnect.contentTypeStreamJson, protoGrpcWeb.contentTypeProto, protoGrpcWeb.contentTypeJson, protoGrpc.contentTypeProto, protoGrpc.contentTypeJson],
    noop,
  );
  instance.addContentTypeParser(protoGrpc.contentTypeRegExp, noop);
  instance.addContentTypeParser(protoGrpcWeb.contentTypeRegExp, noop);
  instance.addContentTypeParser(protoConnect.contentTypeRegExp, noop);
  for (const uHandler of router.handlers) {
    const config: BodyBudgetRouteConfig = { bodyGrowable: true };
    instance.all(uHandler.requestPath, { bodyLimit: serviceMaxBytes.get(uHandler.service.typeName) ?? readMaxBytes, config }, async (req, reply) => {
      try {
        const uRes = await uHandler(await universalRequest(req.raw, reply.raw, readMaxBytes, opts.contextValues?.(req)));
        // fastify keeps the headers set in hooks (request id, interface version) on the reply and
        // moves them to the raw response in reply.send, which this plugin does not use.
        for (const [key, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(key, value);
        if (isUnaryConnectAnswer(uRes)) await writeUnary(uRes, reply.raw);
        else await universalResponseToNodeResponse(uRes, reply.raw);
      } catch (e) {
        const protocol = rpcProtocolOf(req) ?? 'connect';
        // A request that cannot become a call is the client's to fix, answered in its protocol.
        if (e instanceof UnusableRequest) return sendRpcProblem(req, reply, protocol, 'invalid_argument', e.message);
        // The client went away: nothing to answer.
        const code = ConnectError.from(e).code;
        if (code === Code.Aborted || code === Code.Canceled) return leaveUnanswered(reply);
        // Anything else is a bug of this adapter or of node:http (the handlers turn their own
        // errors into protocol errors): said in the log, and to the caller as an internal error in
        // its protocol while nothing was written yet (fastify would otherwise answer an empty 200,
        // which no RPC client can read).
        instance.log.error({ err: e }, `handler for rpc ${uHandler.method.name} of ${uHandler.service.typeName} failed`);
        if (!reply.raw.headersSent) return sendRpcProblem(req, reply, protocol, 'internal', 'internal error');
        reply.raw.destroy();
      }
    });
  }
  done();
}

/**
 * A request that cannot be handed to the library as a call: no host to form its URL from, or a
 * Host (HTTP/2: :authority) that is no authority at all. Answered invalid_argument.
 */
class UnusableRequest extends Error {}

/** Nothing is answered (the client went away): fastify must not send its own empty answer either. */
function leaveUnanswered(reply: FastifyReply): void {
  reply.hijack();
  if (!reply.raw.writableEnded) reply.raw.destroy();
}

/** The client went away before its answer was written: the call's signal aborts (Canceled). */
function wentAway(controller: AbortController, res: NodeResponse, detail: string): void {
  if (!controller.signal.aborted && !res.writableFinished) controller.abort(new ConnectError(`the client closed the call before its answer was written (${detail})`, Code.Canceled));
}

/**
 * HTTP/1.1: one AbortController per connection, not per call (on Node 20 a controller and its
 * signal cost microseconds: an EventTarget built with a prototype switch). The calls of one
 * connection follow each other, and a call stops listening to the signal when it ends (connect
 * removes its listener when the call's own context is aborted at its end), so what the
 * connection's closing aborts is the call still in flight on it, if any: the client went away
 * before its answer. A request that fails without its connection (its body stream destroyed by the
 * handler that stopped reading it) aborts the controller its call holds, and the connection's next
 * call gets a new one (calls a client pipelined on that connection and still in flight hold the
 * same controller and end with it: the client's own calls only).
 */
interface Connection {
  controller: AbortController | null;
}
const connections = new WeakMap<object, Connection>();

/**
 * A connection's controller. Each call in flight on the connection listens to its signal: one at a
 * time, or as many as a client pipelines; none past its end. Node warns from 11 listeners on, once
 * per signal, which a client pipelining over many connections would turn into a flood of false
 * leak warnings: the bound is lifted for this signal only (test/connect-adapter.test.ts counts its
 * listeners after the calls instead).
 */
function connectionController(): AbortController {
  const c = new AbortController();
  setMaxListeners(0, c.signal);
  return c;
}

function connectionOf(req: http.IncomingMessage): Connection {
  const socket = req.socket;
  let conn = connections.get(socket);
  if (conn === undefined) {
    const c: Connection = { controller: null };
    conn = c;
    connections.set(socket, c);
    socket.once('close', () => {
      const controller = c.controller;
      if (controller !== null && !controller.signal.aborted) controller.abort(new ConnectError('the client closed the call before its answer was written (connection closed)', Code.Canceled));
    });
  }
  return conn;
}

async function universalRequest(req: NodeRequest, res: NodeResponse, readMaxBytes: number, contextValues: ContextValues | undefined): Promise<UniversalServerRequest> {
  // The URL first: a request refused for its host leaves no listener behind.
  const authority = 'authority' in req ? req.authority : req.headers.host;
  if (authority === undefined || authority === '') throw new UnusableRequest('the request names no host: send a Host header (HTTP/2: :authority)');
  const encrypted = 'encrypted' in req.socket && (req.socket as { encrypted?: boolean }).encrypted;
  let url: string;
  try {
    url = new URL(req.url ?? '', `${encrypted ? 'https' : 'http'}://${authority}`).href;
  } catch {
    throw new UnusableRequest(`the request's host ${JSON.stringify(authority.slice(0, 200))} is not a valid authority (host, or host:port)`);
  }
  // Listeners below are arrow functions passed inline, never assigned to a name: tsx (esbuild
  // keepNames) names a named closure with Object.defineProperty each time it is made, per call.
  let controller: AbortController;
  if ('stream' in req) {
    // HTTP/2: a stream per call, and a controller per stream.
    const c = new AbortController();
    controller = c;
    req.once('close', () => {
      const rst = req.stream.rstCode;
      // NGHTTP2_NO_ERROR (0) on a stream that finished is a normal end.
      if (rst !== undefined && rst !== 0 && !c.signal.aborted) c.abort(new ConnectError(`the client reset the stream (HTTP/2 error code ${rst})`, Code.Canceled));
      else wentAway(c, res, 'stream closed');
    });
  } else {
    const conn = connectionOf(req);
    const c = (conn.controller ??= connectionController());
    controller = c;
    req.once('error', (e: Error) => {
      if (conn.controller === c) conn.controller = null;
      if (!c.signal.aborted) c.abort(new ConnectError(`the request failed: ${e.message}`, Code.Canceled));
    });
  }
  const header = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (k.startsWith(':') || v === undefined) continue;
    if (typeof v === 'string') header.append(k, v);
    else for (const e of v) header.append(k, e);
  }
  return {
    httpVersion: req.httpVersion,
    method: req.method ?? '',
    url,
    header,
    body: await bodyOf(req, res, readMaxBytes),
    signal: controller.signal,
    contextValues,
  };
}

/**
 * A body whose Content-Length is stated and within readMaxBytes, read whole (node's parser never
 * delivers more than the stated length); otherwise the request stream itself, which the handler
 * reads up to readMaxBytes and refuses beyond. A body of no stated length (gRPC clients send none)
 * grows its reservation in the request body budget as its bytes arrive (src/http/body-budget.ts).
 */
function bodyOf(req: NodeRequest, res: NodeResponse, readMaxBytes: number): Promise<AsyncIterable<Uint8Array>> | AsyncIterable<Uint8Array> {
  const stated = req.headers['content-length'];
  if (stated === undefined && !req.readableEnded) return metered(req as AsyncIterable<Uint8Array>, res);
  const length = stated === undefined ? NaN : Number(stated);
  if (!Number.isSafeInteger(length) || length < 0 || length > readMaxBytes || req.readableEnded) return req as AsyncIterable<Uint8Array>;
  // Inline listeners settled once by a flag (no named closures: see universalRequest).
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let settled = false;
    req.on('data', (c: Buffer) => {
      chunks.push(c);
    });
    req.once('end', () => {
      if (settled) return;
      settled = true;
      resolve(oneChunk(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    });
    req.once('error', (e: Error) => {
      if (settled) return;
      settled = true;
      reject(new ConnectError(`the request body could not be read: ${e.message}`, Code.Canceled));
    });
    req.once('close', () => {
      if (settled || req.readableEnded) return;
      settled = true;
      reject(new ConnectError('the client closed the call while sending its request', Code.Canceled));
    });
  });
}

/**
 * The request stream, its reservation grown to what has arrived before each chunk is passed on.
 * Past the client network's share or the process's budget the call ends with the refusal the
 * budget makes before a body is read, in the call's protocol (RESOURCE_EXHAUSTED or UNAVAILABLE
 * with Retry-After and a RetryInfo), the rest of the body unread.
 */
async function* metered(body: AsyncIterable<Uint8Array>, res: NodeResponse): AsyncGenerator<Uint8Array> {
  let read = 0;
  for await (const chunk of body) {
    read += chunk.byteLength;
    const refusal = growBodyReservation(res, read);
    if (refusal !== null) {
      const code = refusal.problem === 'rate_limited' ? Code.ResourceExhausted : Code.Unavailable;
      throw withRetryInfo(new ConnectError(refusal.detail, code, { 'retry-after': String(refusal.retryAfter) }));
    }
    yield chunk;
  }
}

function oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  return {
    [Symbol.asyncIterator]() {
      let done = false;
      return {
        next() {
          if (done) return Promise.resolve({ done: true, value: undefined });
          done = true;
          return Promise.resolve({ done: false, value: body });
        },
      };
    },
  };
}

/** A Connect unary answer (success or error): one message, no trailers (they travel as headers). */
function isUnaryConnectAnswer(uRes: UniversalServerResponse): boolean {
  if (uRes.trailer !== undefined) return false;
  const type = uRes.header?.get('content-type') ?? '';
  return /^application\/(json|proto)(\s*;|$)/i.test(type);
}

/** Writes a unary answer with a Content-Length in one end() (the body is one message). */
async function writeUnary(uRes: UniversalServerResponse, res: NodeResponse): Promise<void> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (uRes.body !== undefined) {
    for await (const c of uRes.body) {
      chunks.push(c);
      size += c.byteLength;
    }
  }
  const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  res.statusCode = uRes.status;
  uRes.header?.forEach((value, key) => res.setHeader(key, value));
  res.setHeader('content-length', size);
  await new Promise<void>((resolve, reject) => {
    res.once('error', reject);
    (res as http.ServerResponse).end(body, () => resolve());
    // A client gone before the end is written never calls back: the close settles it.
    (res as http.ServerResponse).once('close', () => resolve());
  });
}
