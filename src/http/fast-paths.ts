import type http from 'node:http';
import type http2 from 'node:http2';
import { GetTrustResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { INTERFACE_VERSION } from '../config.js';
import type { GateOutcome, GateService } from '../services/gate.js';
import { rateLimitHeaders, type RateDecision, type RateLimiter } from '../services/rate-limits.js';
import type { TrustService } from '../services/trust.js';
import { handOver } from './hand-over.js';
import { REST_RATE_LIMITS } from './rate-limit.js';
import { requestIdOf } from './request-id.js';
import { restJsonText } from './rest-json.js';
import { gateAnswerHeaders, httpGateRequest } from './routes/gate.js';

// The two hottest requests answered before fastify's request lifecycle (issue 22;
// docs/performance.md "Twelfth pass" and "Thirteenth pass"): cached trust reads
// (`GET /api/trust?url=...`, the most frequent read) and the gateway's gate decision
// (`GET /v1/gate`, one per MCP request a gateway lets through). On a cached answer the service
// call itself is 3-5 µs; the rest of their 30-50 µs of CPU was fastify's request and reply
// objects, its hooks and the features every route passes through (CORS, request id, metrics,
// query schema), which these paths do without.
//
// Each is the same REST adapter, only thinner: the same service call (its contract check
// included), the same JSON text, the same headers in the same order, the same request metrics
// and, for the gate, the same rate-limit token with the same client address. They take a request
// only when nothing else could apply to it, and hand everything else to fastify untouched,
// before or after calling the service:
//
// - HTTP/1.1 `GET`, no body, no `Origin` (a browser's request gets its CORS headers from
//   fastify), the process not draining (fastify answers 503), request logging off (fastify logs
//   each request at debug);
// - trust: path exactly `/api/trust`, one query parameter `url` whose value decodes the same way
//   fastify's query parser decodes it (no `+`, valid percent escapes); the route has no rate
//   limit (checked at start-up: if it ever gets one, this path turns itself off rather than
//   bypass it);
// - gate: path exactly `/v1/gate` (nginx's auth subrequest); the route's rate-limit token is
//   taken here, keyed by the client address fastify would compute (`clientAddress`);
// - the service answers, and for the gate the decision allows: a refusal (400, 404, 503...), a
//   denial (403) or an empty rate-limit bucket (429) is handed to fastify with the request
//   (src/http/hand-over.ts), whose route answers it in problem+json as always without asking the
//   service, or taking a token, a second time.
//
// `test/fast-paths.test.ts` holds both adapters to the same status, header lines and body.

type Request = http.IncomingMessage | http2.Http2ServerRequest;
type Response = http.ServerResponse | http2.Http2ServerResponse;
type Handler = (req: Request, res: Response) => void;

const TRUST_PREFIX = '/api/trust?url=';
/** The routes whose metrics entries the fast paths record into (the fastify routes' patterns). */
const TRUST_ROUTE = '/api/trust';
const GATE_ROUTE = '/v1/gate';
/** Characters a query value may hold for decodeURIComponent to read it exactly as fastify's parser does (no `+`, `&`, `=`). */
const PLAIN_VALUE = /^[A-Za-z0-9\-._~%!$'()*,;:@/?]*$/;
const JSON_TYPE = 'application/json; charset=utf-8';

export interface FastPathDeps {
  trust: Pick<TrustService, 'getTrust'>;
  gate: Pick<GateService, 'decide' | 'bodyText'>;
  /** The per-client limits (the gate's route has one). */
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
  metrics: { entry(method: string, route: string): { record(status: number, seconds: number): void } };
}

export interface FastPaths {
  handler: Handler;
  /** Requests answered here, not by fastify (tests, and the reason to keep this file). */
  answered(): number;
}

/** Wraps fastify's request handler with the fast paths for cached trust reads and gate decisions. */
export function fastPaths(next: Handler, deps: FastPathDeps): FastPaths {
  let answered = 0;
  if (deps.logsRequests) return { handler: next, answered: () => answered };
  // A rate limit on the trust route would be skipped here: then it has no fast path.
  const trustOn = !REST_RATE_LIMITS.has(TRUST_ROUTE);
  const gateLimit = REST_RATE_LIMITS.get(GATE_ROUTE);
  const trustEntry = deps.metrics.entry('GET', TRUST_ROUTE);
  const gateEntry = deps.metrics.entry('GET', GATE_ROUTE);

  const failed = (err: unknown): void => deps.onError?.(err);

  function handler(req: Request, res: Response): void {
    if (
      req.method !== 'GET' ||
      req.httpVersionMajor !== 1 ||
      req.headers.origin !== undefined ||
      req.headers['content-length'] !== undefined ||
      req.headers['transfer-encoding'] !== undefined
    ) {
      return next(req, res);
    }
    const url = req.url ?? '';
    if (url === GATE_ROUTE) {
      if (deps.draining()) return next(req, res);
      decideGate(req as http.IncomingMessage, res as http.ServerResponse).catch(failed);
      return;
    }
    if (!trustOn || !url.startsWith(TRUST_PREFIX) || deps.draining()) return next(req, res);
    const raw = url.slice(TRUST_PREFIX.length);
    if (!PLAIN_VALUE.test(raw)) return next(req, res);
    let target: string;
    try {
      target = decodeURIComponent(raw);
    } catch {
      return next(req, res);
    }
    readTrust(req as http.IncomingMessage, res as http.ServerResponse, target).catch(failed);
  }

  /**
   * Writes a 200 answer: the headers fastify's hooks set first (Vary, X-Request-Id,
   * X-Interface-Version), then the route's own, then Content-Type and Content-Length.
   */
  function answer(req: http.IncomingMessage, res: http.ServerResponse, own: string[], body: string, entry: { record(status: number, seconds: number): void }, started: number): void {
    try {
      res.writeHead(200, [
        'vary',
        'Origin',
        'x-request-id',
        requestIdOf(req),
        'x-interface-version',
        INTERFACE_VERSION,
        ...own,
        'content-type',
        JSON_TYPE,
        'content-length',
        String(Buffer.byteLength(body)),
      ]);
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

  /** Answers one cached trust read, or hands the request to fastify when the service refuses it. */
  async function readTrust(req: http.IncomingMessage, res: http.ServerResponse, target: string): Promise<void> {
    const started = performance.now();
    let body: string;
    try {
      body = restJsonText(GetTrustResponseSchema, await deps.trust.getTrust({ url: target }));
    } catch (error) {
      // Refused (or failed): fastify's route answers it as it answers every other refusal.
      handOver(req, { refused: { error } });
      return next(req, res);
    }
    answer(req, res, [], body, trustEntry, started);
  }

  /** Answers one gate decision that allows, or hands the request to fastify with what it found. */
  async function decideGate(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const started = performance.now();
    // The route's token, as its onRequest hook (src/http/rate-limit.ts) would take it.
    const rate: RateDecision | null = gateLimit === undefined ? null : deps.limits.take(gateLimit, deps.clientAddress(req));
    if (rate !== null && !rate.allowed) {
      handOver(req, { rate });
      return next(req, res);
    }
    let o: GateOutcome;
    let body = '';
    try {
      o = await deps.gate.decide(httpGateRequest(req.headers, undefined), 'http');
      if (o.allow) body = deps.gate.bodyText(o);
    } catch (error) {
      handOver(req, { rate, refused: { error } });
      return next(req, res);
    }
    if (!o.allow) {
      // A denial is problem+json with the decision: fastify's route writes it from this outcome.
      handOver(req, { rate, outcome: o });
      return next(req, res);
    }
    const own: string[] = [];
    if (rate !== null) for (const [k, v] of Object.entries(rateLimitHeaders(rate))) own.push(k, v);
    for (const [k, v] of Object.entries(gateAnswerHeaders(o))) own.push(k, v);
    answer(req, res, own, body, gateEntry, started);
  }

  return { handler, answered: () => answered };
}
