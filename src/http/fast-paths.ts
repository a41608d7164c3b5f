import type http from 'node:http';
import type http2 from 'node:http2';
import { GetTrustResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { INTERFACE_VERSION } from '../config.js';
import { PreflightResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import type { GateOutcome, GateService } from '../services/gate.js';
import type { PreflightService } from '../services/preflight.js';
import { rateLimitPolicy, rateLimitState, type RateDecision, type RateLimiter, type RateLimitName } from '../services/rate-limits.js';
import type { TrustService } from '../services/trust.js';
import { handOver, type HandOver } from './hand-over.js';
import { REST_RATE_LIMITS } from './rate-limit.js';
import { requestIdOf } from './request-id.js';
import { restJsonText } from './rest-json.js';
import { gateAnswerHeaders, httpGateRequest } from './routes/gate.js';

// The hottest requests answered before fastify's request lifecycle (issue 22;
// docs/performance.md "Twelfth pass" and "Thirteenth pass"): cached trust reads
// (`GET /api/trust?url=...`, the most frequent read), pre-flight checks
// (`GET /v1/preflight?target=...`, before every tool call of an agent) and the gateway's gate
// decision (`GET /v1/gate`, one per MCP request a gateway lets through). On a cached answer the
// service call itself is 3-5 µs; the rest of their 30-50 µs of CPU was fastify's request and
// reply objects, its hooks and the features every route passes through (CORS, request id,
// metrics, query schema), which these paths do without.
//
// Each is the same REST adapter, only thinner: the same service call (its contract check
// included), the same JSON text, the same headers in the same order, the same request metrics
// and the route's rate-limit token, taken with the client address fastify would compute
// (`clientAddress`). They take a request only when nothing else could apply to it, and hand
// everything else to fastify untouched, before or after calling the service:
//
// - HTTP/1.1 `GET`, no body, no `Origin` (a browser's request gets its CORS headers from
//   fastify), the process not draining (fastify answers 503), request logging off (fastify logs
//   each request at debug);
// - trust and pre-flight: path exactly `/api/trust` or `/v1/preflight`, one query parameter
//   (`url`, `target`) whose value decodes the same way fastify's query parser decodes it (no `+`,
//   valid percent escapes);
// - gate: path exactly `/v1/gate` (nginx's auth subrequest);
// - the service answers, and for the gate the decision allows: a refusal (400, 404, 503...), a
//   denial (403) or an empty rate-limit bucket (429) is handed to fastify with the request
//   (src/http/hand-over.ts), whose route answers it in problem+json as always without asking the
//   service, or taking a token, a second time.
//
// `test/fast-paths.test.ts` holds both adapters to the same status, header lines and body.

type Request = http.IncomingMessage | http2.Http2ServerRequest;
type Response = http.ServerResponse | http2.Http2ServerResponse;
type Handler = (req: Request, res: Response) => void;
type Entry = { record(status: number, seconds: number): void };

const GATE_ROUTE = '/v1/gate';
/** Characters a query value may hold for decodeURIComponent to read it exactly as fastify's parser does (no `+`, `&`, `=`). */
const PLAIN_VALUE = /^[A-Za-z0-9\-._~%!$'()*,;:@/?]*$/;
const JSON_TYPE = 'application/json; charset=utf-8';
const NO_STORE = ['cache-control', 'no-store'] as const;

export interface FastPathDeps {
  trust: Pick<TrustService, 'getTrust'>;
  preflight: Pick<PreflightService, 'preflight'>;
  gate: Pick<GateService, 'decide' | 'bodyText'>;
  /** The per-client limits (the pre-flight and gate routes have one). */
  limits: Pick<RateLimiter, 'take'>;
  /** The client address exactly as fastify's `req.ip` (src/http/client-address.ts `clientAddressOf`). */
  clientAddress(req: http.IncomingMessage): string | undefined;
  /** Whether the process is draining (fastify answers 503 then). */
  draining(): boolean;
  /** Request logging is on (LOG_LEVEL debug or trace): fastify logs every request. */
  logsRequests: boolean;
  /** Told of an answer that failed after the service answered (a bug): logged, never an unhandled rejection. */
  onError?: (err: unknown) => void;
  /** The request metrics entry of a route (src/http/metrics.ts). */
  metrics: { entry(method: string, route: string): Entry };
}

export interface FastPaths {
  handler: Handler;
  /** Requests answered here, not by fastify (tests, and the reason to keep this file). */
  answered(): number;
}

/** A read of one query parameter: `GET <route>?<param>=<value>` and nothing else. */
interface QueryPath {
  /** `<route>?<param>=`. */
  prefix: string;
  entry: Entry;
  /** The route's rate limit (REST_RATE_LIMITS), taken here as its hook would. */
  limit: RateLimitName | undefined;
  /** The service call and its JSON text; a rejection is the service's refusal. */
  call(value: string): Promise<string>;
  /** The route's own headers, between the rate limit's and Content-Type. */
  headers: readonly string[];
}

/** Wraps fastify's request handler with the fast paths for cached trust reads, pre-flight checks and gate decisions. */
export function fastPaths(next: Handler, deps: FastPathDeps): FastPaths {
  let answered = 0;
  if (deps.logsRequests) return { handler: next, answered: () => answered };
  const queryPath = (route: string, param: string, call: QueryPath['call'], headers: readonly string[] = []): QueryPath => ({
    prefix: `${route}?${param}=`,
    entry: deps.metrics.entry('GET', route),
    limit: REST_RATE_LIMITS.get(route),
    call,
    headers,
  });
  const trust = queryPath('/api/trust', 'url', async (url) => restJsonText(GetTrustResponseSchema, await deps.trust.getTrust({ url })));
  // Every pre-flight answer is a signed statement of this moment: never kept by an HTTP cache (routes/preflight.ts).
  const preflight = queryPath('/v1/preflight', 'target', async (target) => restJsonText(PreflightResponseSchema, await deps.preflight.preflight({ target })), NO_STORE);
  const gateLimit = REST_RATE_LIMITS.get(GATE_ROUTE);
  const gateEntry = deps.metrics.entry('GET', GATE_ROUTE);

  const failed = (err: unknown): void => deps.onError?.(err);

  function handler(req: Request, res: Response): void {
    if (
      req.method !== 'GET' ||
      req.httpVersionMajor !== 1 ||
      req.headers.origin !== undefined ||
      req.headers['content-length'] !== undefined ||
      req.headers['transfer-encoding'] !== undefined ||
      deps.draining()
    ) {
      return next(req, res);
    }
    const url = req.url ?? '';
    if (url === GATE_ROUTE) {
      decideGate(req as http.IncomingMessage, res as http.ServerResponse).catch(failed);
      return;
    }
    const path = url.startsWith(trust.prefix) ? trust : url.startsWith(preflight.prefix) ? preflight : undefined;
    if (path === undefined) return next(req, res);
    const raw = url.slice(path.prefix.length);
    if (!PLAIN_VALUE.test(raw)) return next(req, res);
    let value: string;
    try {
      value = decodeURIComponent(raw);
    } catch {
      return next(req, res);
    }
    read(path, req as http.IncomingMessage, res as http.ServerResponse, value).catch(failed);
  }

  /** The route's rate-limit decision, as its onRequest hook (src/http/rate-limit.ts) would take it; null: no limit is on. */
  const token = (limit: RateLimitName | undefined, req: http.IncomingMessage): RateDecision | null =>
    limit === undefined ? null : deps.limits.take(limit, deps.clientAddress(req));

  /** Hands the request to fastify with what was found: its route and rate-limit hook answer from it. */
  function toFastify(req: http.IncomingMessage, res: http.ServerResponse, what: HandOver): void {
    handOver(req, what);
    next(req, res);
  }

  /**
   * Writes a 200 answer: the headers fastify's hooks set first (Vary, X-Request-Id,
   * X-Interface-Version, then the rate limit's), then the route's own, then Content-Type and
   * Content-Length.
   */
  function answer(req: http.IncomingMessage, res: http.ServerResponse, rate: RateDecision | null, own: readonly string[], body: string, entry: Entry, started: number): void {
    try {
      const lines = ['vary', 'Origin', 'x-request-id', requestIdOf(req), 'x-interface-version', INTERFACE_VERSION];
      if (rate !== null) lines.push('ratelimit-policy', rateLimitPolicy(rate), 'ratelimit', rateLimitState(rate));
      lines.push(...own, 'content-type', JSON_TYPE, 'content-length', String(Buffer.byteLength(body)));
      res.writeHead(200, lines);
      res.end(body);
      answered++;
      entry.record(200, (performance.now() - started) / 1000);
    } catch (err) {
      // Nothing here should throw; if it does, fastify answers while nothing was sent, otherwise
      // the connection ends rather than carry half an answer.
      failed(err);
      if (!res.headersSent) next(req, res);
      else res.destroy();
    }
  }

  /** Answers one read of a query path, or hands the request to fastify when refused (rate limit or service). */
  async function read(path: QueryPath, req: http.IncomingMessage, res: http.ServerResponse, value: string): Promise<void> {
    const started = performance.now();
    const rate = token(path.limit, req);
    if (rate !== null && !rate.allowed) return toFastify(req, res, { rate });
    let body: string;
    try {
      body = await path.call(value);
    } catch (error) {
      // Refused (or failed): fastify's route answers it as it answers every other refusal.
      return toFastify(req, res, { rate, refused: { error } });
    }
    answer(req, res, rate, path.headers, body, path.entry, started);
  }

  /** Answers one gate decision that allows, or hands the request to fastify with what it found. */
  async function decideGate(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const started = performance.now();
    const rate = token(gateLimit, req);
    if (rate !== null && !rate.allowed) return toFastify(req, res, { rate });
    let o: GateOutcome;
    let body = '';
    try {
      o = await deps.gate.decide(httpGateRequest(req, undefined), 'http');
      if (o.allow) body = deps.gate.bodyText(o);
    } catch (error) {
      return toFastify(req, res, { rate, refused: { error } });
    }
    // A denial is problem+json with the decision: fastify's route writes it from this outcome.
    if (!o.allow) return toFastify(req, res, { rate, outcome: o });
    const own: string[] = [];
    for (const [k, v] of Object.entries(gateAnswerHeaders(o))) own.push(k, v);
    answer(req, res, rate, own, body, gateEntry, started);
  }

  return { handler, answered: () => answered };
}
