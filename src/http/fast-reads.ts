import type http from 'node:http';
import type http2 from 'node:http2';
import { GetTrustResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { INTERFACE_VERSION } from '../config.js';
import type { TrustService } from '../services/trust.js';
import { REST_RATE_LIMITS } from './rate-limit.js';
import { requestIdOf } from './request-id.js';
import { restJsonText } from './rest-json.js';

// Cached trust reads answered before fastify's request lifecycle (issue 22, item 3;
// docs/performance.md "Twelfth pass"). `GET /api/trust?url=...` is the service's most frequent
// read, and on a cached answer the service call itself is 2.8 µs: the rest of its ~30 µs of CPU
// was fastify's request and reply objects, its hooks and the features every route passes
// through (CORS, request id, metrics, the query schema), about 7 µs of which this path skips.
//
// It is the same REST adapter, only thinner: the same service call (its contract check
// included), the same JSON text, the same headers in the same order (`Vary`, `X-Request-Id`,
// `X-Interface-Version`, `Content-Type`, `Content-Length`), the same request metrics. It takes a
// request only when nothing else could apply to it, and hands everything else to fastify
// untouched, before or after calling the service:
//
// - HTTP/1.1 `GET`, path exactly `/api/trust`, one query parameter `url` whose value decodes the
//   same way fastify's query parser decodes it (no `+`, valid percent escapes), no body;
// - no `Origin` (a browser's request gets its CORS headers from fastify), the process not draining
//   (fastify answers 503), request logging off (fastify logs each request at debug);
// - a route without a rate limit (checked at start-up: if `/api/trust` ever gets one, this path
//   turns itself off rather than bypass it);
// - the service answers: a refusal (400, 404, 503...) is handed to fastify with the request
//   (`kRefusal`), whose route answers it in problem+json as always without asking the service a
//   second time (an unknown server costs one database look-up, not two).
//
// `test/fast-reads.test.ts` holds both paths to the same status, headers and body.

type Request = http.IncomingMessage | http2.Http2ServerRequest;
type Response = http.ServerResponse | http2.Http2ServerResponse;
type Handler = (req: Request, res: Response) => void;

/** The service's refusal of a request this path handed to fastify: the route answers it (routes/trust.ts). */
export const kRefusal = Symbol('the service refused this request on the fast path');
type Refused = { [kRefusal]?: unknown };

const PREFIX = '/api/trust?url=';
/** The route whose metrics entry the fast path records into (the fastify route's pattern). */
const ROUTE = '/api/trust';
/** Characters a query value may hold for decodeURIComponent to read it exactly as fastify's parser does (no `+`, `&`, `=`). */
const PLAIN_VALUE = /^[A-Za-z0-9\-._~%!$'()*,;:@/?]*$/;

export interface FastReadDeps {
  trust: Pick<TrustService, 'getTrust'>;
  /** Whether the process is draining (fastify answers 503 then). */
  draining(): boolean;
  /** Request logging is on (LOG_LEVEL debug or trace): fastify logs every request. */
  logsRequests: boolean;
  /** Told of an answer that failed after the service answered (a bug): logged, never an unhandled rejection. */
  onError?: (err: unknown) => void;
  /** The request metrics entry of a route (src/http/metrics.ts). */
  metrics: { entry(method: string, route: string): { record(status: number, seconds: number): void } };
}

export interface FastReads {
  handler: Handler;
  /** Requests answered here, not by fastify (tests, and the reason to keep this file). */
  answered(): number;
}

/** Wraps fastify's request handler with the fast path for cached trust reads. */
export function fastReads(next: Handler, deps: FastReadDeps): FastReads {
  let answered = 0;
  // A rate limit on the route would be skipped here: then there is no fast path at all.
  if (REST_RATE_LIMITS.has(ROUTE) || deps.logsRequests) return { handler: next, answered: () => answered };
  const entry = deps.metrics.entry('GET', ROUTE);

  const failed = (err: unknown): void => deps.onError?.(err);

  function handler(req: Request, res: Response): void {
    const url = req.url ?? '';
    if (
      req.method !== 'GET' ||
      req.httpVersionMajor !== 1 ||
      !url.startsWith(PREFIX) ||
      req.headers.origin !== undefined ||
      req.headers['content-length'] !== undefined ||
      req.headers['transfer-encoding'] !== undefined ||
      deps.draining()
    ) {
      return next(req, res);
    }
    const raw = url.slice(PREFIX.length);
    if (!PLAIN_VALUE.test(raw)) return next(req, res);
    let target: string;
    try {
      target = decodeURIComponent(raw);
    } catch {
      return next(req, res);
    }
    respond(req, res, target).catch(failed);
  }

  /** Answers one cached trust read, or hands the request to fastify when the service refuses it. */
  async function respond(req: Request, res: Response, target: string): Promise<void> {
    const started = performance.now();
    let answer;
    try {
      answer = await deps.trust.getTrust({ url: target });
    } catch (err) {
      // Refused (or failed): fastify's route answers it as it answers every other refusal.
      (req as Refused)[kRefusal] = err;
      return next(req, res);
    }
    try {
      const body = restJsonText(GetTrustResponseSchema, answer);
      (res as http.ServerResponse).writeHead(200, [
        'vary',
        'Origin',
        'x-request-id',
        requestIdOf(req),
        'x-interface-version',
        INTERFACE_VERSION,
        'content-type',
        'application/json; charset=utf-8',
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
  return { handler, answered: () => answered };
}
