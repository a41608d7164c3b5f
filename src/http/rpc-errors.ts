import type http2 from 'node:http2';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Code, ConnectError, type ConnectRouter, type Interceptor } from '@connectrpc/connect';
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from '@connectrpc/connect/protocol';
import { codeToHttpStatus, codeToString, errorToJson } from '@connectrpc/connect/protocol-connect';
import { headerGrpcMessage, headerGrpcStatus, headerStatusDetailsBin, setTrailerStatus } from '@connectrpc/connect/protocol-grpc';
import { RetryInfoSchema } from '../../gen/google/rpc/error_details_pb.js';
import { isConnectionError, isRefusedValueError } from '../db/index.js';
import { PROBLEMS, type ProblemCode } from '../errors.js';

// Native errors per protocol (docs/grpc.md "Errors per protocol"). One path family,
// /<package>.<Service>/<Method>, serves Connect, gRPC and gRPC-Web; REST lives elsewhere. A
// refusal raised before a Connect handler runs (unknown method, unsupported content type, a
// body over the limit, a draining process) is answered in the caller's own protocol:
//   gRPC      HTTP 200, trailers-only: grpc-status and grpc-message (what every gRPC client reads)
//   gRPC-Web  HTTP 200, grpc-status and grpc-message headers (trailers-only, as Envoy answers)
//   Connect   the Connect error JSON {code, message}: unary with the HTTP status of the code,
//             streaming as an end-of-stream message with HTTP 200
//   REST      problem+json (src/http/problem.ts), unchanged
// A refusal that says when to retry (Retry-After) says it in the caller's protocol too: a
// google.rpc.RetryInfo detail, in grpc-status-details-bin (gRPC, gRPC-Web) or the Connect error's
// details. OTLP exporters (the Collector's, Go's) retry RESOURCE_EXHAUSTED only when it is there
// and drop the batch otherwise; gRPC clients in general read a retry delay nowhere else.

export type RpcProtocol = 'grpc' | 'grpc-web' | 'connect';

/** /package.Service/Method: the path shape of every RPC; no REST path has a dotted first segment. */
const RPC_PATH = /^\/[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\/[A-Za-z_]\w*$/;

/** The RPC protocol a request speaks, or null for REST (and everything else). */
export function rpcProtocolOf(req: { headers: Record<string, string | string[] | undefined>; url: string }): RpcProtocol | null {
  const ct = String(req.headers['content-type'] ?? '').toLowerCase();
  if (ct.startsWith('application/grpc-web')) return 'grpc-web';
  if (ct.startsWith('application/grpc')) return 'grpc';
  const path = req.url.split('?')[0] ?? '';
  return RPC_PATH.test(path) ? 'connect' : null;
}

/** Content types each protocol accepts, named in refusals so that the caller can correct itself. */
export const RPC_CONTENT_TYPES =
  'Connect unary application/json or application/proto (or GET with ?connect=v1&encoding=...), Connect streaming application/connect+json or application/connect+proto, gRPC application/grpc, gRPC-Web application/grpc-web';

function grpcMessage(message: string): string {
  return encodeURIComponent(message);
}

/** The seconds a Retry-After value names (the service sends delta-seconds only), or null. */
export function retryAfterSeconds(value: string | null | undefined): number | null {
  const v = value?.trim();
  return v !== undefined && /^\d{1,9}$/.test(v) ? Number(v) : null;
}

/**
 * Adds to a ConnectError whose metadata carries Retry-After a google.rpc.RetryInfo detail with
 * the same delay (unless it has one), so that connect-es sends it in grpc-status-details-bin
 * (gRPC, gRPC-Web) and in the Connect error's `details`. Returns its argument.
 */
export function withRetryInfo<E>(err: E): E {
  if (!(err instanceof ConnectError)) return err;
  const seconds = retryAfterSeconds(err.metadata.get('retry-after'));
  if (seconds === null || err.details.some((d) => ('desc' in d ? d.desc.typeName : d.type) === RetryInfoSchema.typeName)) return err;
  err.details.push({ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(seconds), nanos: 0 } } });
  return err;
}

/**
 * The interceptor that gives every handler's refusal with a Retry-After its RetryInfo (rate
 * limits, bounded streams, a lost database ...), whatever raised it: put it first, so that it
 * sees what the other interceptors throw. Streamed responses are covered too (an error thrown
 * while the handler streams).
 */
export function retryInfoOnRefusals(): Interceptor {
  return (next) => async (req) => {
    let res;
    try {
      res = await next(req);
    } catch (err) {
      throw withRetryInfo(err);
    }
    if (!res.stream) return res;
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
        } catch (err) {
          throw withRetryInfo(err);
        }
      })(),
    };
  };
}

/** grpc-status, grpc-message and (with details) grpc-status-details-bin of an error, as connect-es writes them. */
function grpcStatusHeaders(err: ConnectError): Record<string, string> {
  // The error carries no metadata here (the caller's headers travel separately): only the status fields are set.
  const h = setTrailerStatus(new Headers(), err);
  const out: Record<string, string> = {};
  for (const k of [headerGrpcStatus, headerGrpcMessage, headerStatusDetailsBin]) {
    const v = h.get(k);
    if (v !== null) out[k] = v;
  }
  return out;
}

/** The error a refusal is: code and message, and a RetryInfo detail when `headers` carry Retry-After. */
function refusalError(code: Code, message: string, headers: Record<string, string>): ConnectError {
  const err = new ConnectError(message, code);
  const seconds = retryAfterSeconds(Object.entries(headers).find(([k]) => k.toLowerCase() === 'retry-after')?.[1]);
  if (seconds !== null) err.details.push({ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(seconds), nanos: 0 } } });
  return err;
}

/**
 * Answers `reply` with an error in the protocol of its request. `headers` are extra response
 * headers (Retry-After, Allow ...).
 */
export function sendRpcError(req: FastifyRequest, reply: FastifyReply, protocol: RpcProtocol, code: Code, message: string, headers: Record<string, string> = {}): FastifyReply | void {
  const requestType = String(req.headers['content-type'] ?? '').toLowerCase();
  const err = refusalError(code, message, headers);
  if (protocol === 'grpc') {
    const raw = reply.raw as unknown as { stream?: http2.ServerHttp2Stream };
    const status = grpcStatusHeaders(err);
    if (raw.stream && !raw.stream.headersSent && !raw.stream.destroyed) {
      // A real trailers-only response: one HEADERS frame with END_STREAM, as the gRPC spec
      // defines for an immediate error. The hooks' headers (request id, CORS) go along.
      reply.hijack();
      const out: http2.OutgoingHttpHeaders = { ':status': 200 };
      for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined && k !== 'content-length' && k !== 'connection') out[k] = v as string;
      Object.assign(out, headers, { 'content-type': 'application/grpc' }, status);
      raw.stream.respond(out, { endStream: true });
      // The client may still be sending; it has its answer and the stream is done.
      raw.stream.resume();
      return;
    }
    // gRPC over HTTP/1.1 is not gRPC; answer what a client could still read.
    return reply.code(200).headers(headers).headers(status).type('application/grpc').send();
  }
  if (protocol === 'grpc-web') {
    const type = requestType.startsWith('application/grpc-web-text') ? 'application/grpc-web-text+proto' : 'application/grpc-web+proto';
    return reply.code(200).headers(headers).headers(grpcStatusHeaders(err)).type(type).send();
  }
  const body = { ...errorToJson(err, undefined), message };
  if (/^application\/connect\+/.test(requestType)) {
    // Connect streaming: HTTP 200 and an end-of-stream message (flag 0x02) carrying the error.
    const json = Buffer.from(JSON.stringify({ error: body }));
    const frame = Buffer.alloc(5 + json.length);
    frame[0] = 0x02;
    frame.writeUInt32BE(json.length, 1);
    json.copy(frame, 5);
    const type = requestType.startsWith('application/connect+proto') ? 'application/connect+proto' : 'application/connect+json';
    return reply.code(200).headers(headers).type(type).send(frame);
  }
  // Connect unary (and GET): the HTTP status of the code (Connect's table).
  return reply.code(codeToHttpStatus(code)).headers(headers).type('application/json').send(body);
}

/** Sends a problem code (src/errors.ts) as a native error of `protocol`. */
export function sendRpcProblem(req: FastifyRequest, reply: FastifyReply, protocol: RpcProtocol, problem: ProblemCode, message: string, headers: Record<string, string> = {}) {
  return sendRpcError(req, reply, protocol, PROBLEMS[problem].code, message, headers);
}

/** An unknown method of the RPC path family, in the caller's protocol. */
export function sendUnknownMethod(req: FastifyRequest, reply: FastifyReply, protocol: RpcProtocol) {
  const path = (req.url.split('?')[0] ?? '').slice(0, 512);
  const message = `unknown method ${path}; list them with grpc.reflection or see proto/`;
  if (protocol === 'connect' && !/^application\/connect\+/.test(String(req.headers['content-type'] ?? '').toLowerCase())) {
    // 404 is what a Connect client maps to unimplemented even when it ignores the body.
    return reply.code(404).type('application/json').send({ code: codeToString(Code.Unimplemented), message });
  }
  return sendRpcError(req, reply, protocol, Code.Unimplemented, message);
}

// --- Refusals the Connect runtime answers with an empty body -------------------------------

const EMPTY_REFUSALS: Record<number, { code: Code; message: (req: UniversalServerRequest) => string }> = {
  405: { code: Code.Unimplemented, message: (req) => `${req.method} is not allowed for this method; use POST (GET only for side-effect-free methods, with ?connect=v1&encoding=json&message=...)` },
  415: { code: Code.InvalidArgument, message: (req) => `unsupported content type ${JSON.stringify((req.header.get('content-type') ?? '(none)').slice(0, 100))} for this method; use ${RPC_CONTENT_TYPES} (client-streaming methods take only the streaming types)` },
};

async function isEmpty(body: UniversalServerResponse['body']): Promise<boolean> {
  if (!body) return true;
  return (body as unknown) instanceof Uint8Array && (body as unknown as Uint8Array).byteLength === 0;
}

function withConnectBody(h: UniversalHandler): UniversalHandler {
  const wrapped = async (req: UniversalServerRequest): Promise<UniversalServerResponse> => {
    const res = await h(req);
    const refusal = EMPTY_REFUSALS[res.status];
    if (!refusal || !(await isEmpty(res.body))) return res;
    const message = refusal.message(req);
    const ct = (req.header.get('content-type') ?? '').toLowerCase();
    const header = new Headers(res.header);
    if (res.status === 405) header.set('allow', h.allowedMethods.join(', '));
    if (ct.startsWith('application/grpc')) {
      // A gRPC or gRPC-Web request the handler refused (e.g. GET): the status in headers, HTTP 200.
      header.set('content-type', ct.startsWith('application/grpc-web') ? 'application/grpc-web+proto' : 'application/grpc+proto');
      header.set('grpc-status', String(refusal.code));
      header.set('grpc-message', grpcMessage(message));
      return { status: 200, header };
    }
    const body = new TextEncoder().encode(JSON.stringify({ code: codeToString(refusal.code), message }));
    header.set('content-type', 'application/json');
    header.set('content-length', String(body.byteLength));
    return { ...res, header, body: (async function* () { yield body; })() };
  };
  return Object.assign(wrapped, h) as UniversalHandler;
}

/** Rewrites, in place, every handler the router holds so that its empty-body refusals carry a Connect error (call after all services are registered). */
export function refusalsCarryConnectErrors(router: ConnectRouter): void {
  const hs = router.handlers;
  for (let i = 0; i < hs.length; i++) hs[i] = withConnectBody(hs[i]!);
}

/**
 * Errors a handler throws that are not ConnectErrors: a lost database is UNAVAILABLE (retry),
 * text the database cannot store is INVALID_ARGUMENT, anything else INTERNAL without its message
 * (connect-es would send the raw message of any Error, SQL and paths included).
 */
export function nativeHandlerErrors(log: (err: unknown) => void): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (err instanceof ConnectError) throw err;
      // Retry-After as REST says it (src/http/problem.ts); retryInfoOnRefusals adds its RetryInfo.
      if (isConnectionError(err)) throw new ConnectError('the database is unavailable; retry shortly', Code.Unavailable, { 'retry-after': '2' });
      if (isRefusedValueError(err)) throw new ConnectError('the request contains characters that cannot be stored (e.g. NUL)', Code.InvalidArgument);
      log(err);
      throw new ConnectError('internal error', Code.Internal);
    }
  };
}
