import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ConnectError } from '@connectrpc/connect';
import { isConnectionError, isRefusedValueError } from '../db/index.js';
import { rpcProtocolOf, sendRpcProblem, sendUnknownMethod, RPC_CONTENT_TYPES } from './rpc-errors.js';
import { ObservatoryError, PROBLEMS, PROBLEM_CONTENT_TYPE, problemBody, problemForConnectCode, type ProblemCode } from '../errors.js';

export { PROBLEM_CONTENT_TYPE, problemBody, type ProblemBody } from '../errors.js';

export function sendProblem(reply: FastifyReply, code: ProblemCode, detail: string, opts: { extra?: Record<string, unknown>; headers?: Record<string, string> } = {}) {
  const body = problemBody(code, detail, String(reply.request.id), opts.extra);
  if (opts.headers) reply.headers(opts.headers);
  return reply.code(body.status).type(PROBLEM_CONTENT_TYPE).send(body);
}

/** Turns anything thrown into a problem: our errors keep their code, the rest never leak internals. */
export function problemFromError(err: unknown): { code: ProblemCode; detail: string; extra?: Record<string, unknown>; headers?: Record<string, string> } {
  if (err instanceof ObservatoryError) return { code: err.problem, detail: err.rawMessage, extra: err.extra, headers: err.headers };
  const fe = err as FastifyError;
  if (fe && typeof fe === 'object') {
    if (fe.validation) return { code: 'invalid_argument', detail: `${fe.validationContext ?? 'request'} ${fe.validation[0]?.instancePath ?? ''} ${fe.validation[0]?.message ?? 'is invalid'}`.replace(/\s+/g, ' ').trim() };
    switch (fe.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return { code: 'payload_too_large', detail: 'the request body is larger than this endpoint accepts' };
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return { code: 'unsupported_media_type', detail: 'unsupported Content-Type; send application/json' };
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return { code: 'invalid_argument', detail: 'the JSON body is empty' };
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
        return { code: 'invalid_argument', detail: fe.code === 'FST_ERR_CTP_INVALID_JSON_BODY' ? 'the body is not valid JSON' : 'invalid Content-Length' };
    }
    if (err instanceof SyntaxError || fe.statusCode === 400) return { code: 'invalid_argument', detail: 'the request is malformed' };
    if (fe.statusCode === 413) return { code: 'payload_too_large', detail: 'the request body is too large' };
    if (fe.statusCode === 415) return { code: 'unsupported_media_type', detail: 'unsupported Content-Type' };
  }
  if (err instanceof ConnectError) {
    const code = problemForConnectCode(err.code);
    return { code, detail: code === 'internal' ? 'internal error' : err.rawMessage };
  }
  // Text PostgreSQL cannot store (NUL, invalid encoding) that slipped past a service's checks is
  // the client's input, not our failure.
  if (isRefusedValueError(err)) return { code: 'invalid_argument', detail: 'the request contains characters that cannot be stored (e.g. NUL)' };
  if (isConnectionError(err)) return { code: 'unavailable', detail: 'the database is unavailable; retry shortly', headers: { 'retry-after': '2' } };
  return { code: 'internal', detail: 'internal error' };
}

/** Route config of a route whose protocol has an error body of its own (OTLP/HTTP: a google.rpc.Status). */
export interface RefusalRouteConfig {
  sendRefusal?: (req: FastifyRequest, reply: FastifyReply, code: ProblemCode, detail: string, headers: Record<string, string>) => FastifyReply | void;
}

/**
 * A refusal in the caller's protocol: Connect, gRPC and gRPC-Web callers get their own protocol's
 * error (src/http/rpc-errors.ts), a route with an error body of its own (RefusalRouteConfig) that
 * body, everyone else problem+json.
 */
export function sendProblemToCaller(req: FastifyRequest, reply: FastifyReply, code: ProblemCode, detail: string, headers: Record<string, string> = {}) {
  const own = (req.routeOptions.config as RefusalRouteConfig | undefined)?.sendRefusal;
  if (own) return own(req, reply, code, detail, headers);
  const rpc = rpcProtocolOf(req);
  if (rpc) return sendRpcProblem(req, reply, rpc, code, detail, headers);
  return sendProblem(reply, code, detail, { headers });
}

/**
 * Logs a call that failed on the service's side (REST, Connect, OTLP, MCP tools and A2A alike). A
 * database that is unavailable fails every call that needs it at once (an outage measured 3,182
 * error lines in 30 s, one per request), and so does one that is only slow: the service's own
 * `unavailable` refusals (a write queue that waited its bound, a request abandoned by its client
 * before its write, a read waiting for its rollups past its bound) come in floods, one per
 * request, and any client that leaves early makes one. Those are one warning a second per
 * process, saying how many were not logged since the last; anything else (a bug) is an error line
 * each.
 */
export function logFailure(log: Pick<FastifyBaseLogger, 'error' | 'warn'>, err: unknown, code: ProblemCode, fields: Record<string, unknown> = {}): void {
  if (PROBLEMS[code].status < 500) return;
  if (code !== 'unavailable' || !(isConnectionError(err) || err instanceof ObservatoryError)) {
    log.error({ err, ...fields }, 'request failed');
    return;
  }
  const now = Date.now();
  if (now - outage.loggedAt < 1_000) {
    outage.unlogged++;
    return;
  }
  log.warn({ err, ...fields, unlogged_since_last: outage.unlogged }, 'database unavailable: answered 503');
  outage.loggedAt = now;
  outage.unlogged = 0;
}
const outage = { loggedAt: 0, unlogged: 0 };

export function installProblemHandlers(app: FastifyInstance) {
  app.setErrorHandler((err, req: FastifyRequest, reply: FastifyReply) => {
    const p = problemFromError(err);
    logFailure(req.log, err, p.code);
    // Connect, gRPC and gRPC-Web callers get their own protocol's error (src/http/rpc-errors.ts).
    const rpc = rpcProtocolOf(req);
    if (rpc) {
      const detail = p.code === 'unsupported_media_type' ? `unsupported content type; use ${RPC_CONTENT_TYPES}` : p.detail;
      return sendRpcProblem(req, reply, rpc, p.code, detail, p.headers);
    }
    return sendProblem(reply, p.code, p.detail, p);
  });
  app.setNotFoundHandler((req, reply) => {
    const rpc = rpcProtocolOf(req);
    if (rpc) return sendUnknownMethod(req, reply, rpc);
    const path = req.url.split('?')[0] ?? '';
    const allowed = allowedMethods(app, path);
    if (allowed.length > 0) {
      return sendProblem(reply, 'method_not_allowed', `${req.method} is not allowed on ${path}; use ${allowed.join(', ')}`, {
        headers: { allow: allowed.join(', ') },
      });
    }
    return sendProblem(reply, 'not_found', `no resource at ${path}`);
  });
}

// Routes seen by the onRoute hook, as patterns, so that a known path asked with the wrong
// method gets 405 with Allow instead of 404.
const routeTable = new WeakMap<FastifyInstance, { re: RegExp; method: string }[]>();

const routeList = new WeakMap<FastifyInstance, { method: string; url: string }[]>();

/** fastify's route table as registered (method, URL pattern), for the OpenAPI cross-check. */
export function registeredRoutes(app: FastifyInstance): readonly { method: string; url: string }[] {
  return routeList.get(app) ?? [];
}

export function trackRoutes(app: FastifyInstance) {
  const table: { re: RegExp; method: string }[] = [];
  routeTable.set(app, table);
  const list: { method: string; url: string }[] = [];
  routeList.set(app, list);
  app.addHook('onRoute', (opts) => {
    const methods = Array.isArray(opts.method) ? opts.method : [opts.method];
    for (const m of methods) list.push({ method: String(m).toUpperCase(), url: opts.url });
    const src = opts.url
      .split('/')
      .map((seg) => (seg.startsWith(':') ? '[^/]+' : seg === '*' ? '.*' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    const re = new RegExp(`^${src}$`);
    for (const m of methods) table.push({ re, method: String(m).toUpperCase() });
  });
}

function allowedMethods(app: FastifyInstance, path: string): string[] {
  const table = routeTable.get(app) ?? [];
  const methods = new Set(table.filter((r) => r.re.test(path) && r.method !== 'OPTIONS').map((r) => r.method));
  return [...methods];
}
