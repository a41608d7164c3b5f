import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type http from 'node:http';
import type http2 from 'node:http2';
import { addToNetwork, clientNetwork } from '../domain/client-network.js';
import { sendProblemToCaller } from './problem.js';
import { withRouteHook } from './route-hooks.js';

// How many bytes of request bodies the process may hold at once (HTTP_BODY_BUDGET_BYTES), and one
// client network an eighth of them (docs/reliability.md "Request bodies in flight"). A route that
// buffers its body keeps up to its body limit per request until the request ends: 4 MiB for an
// OTLP export, BODY_LIMIT elsewhere. The connection cap bounds connections and
// HTTP2_MAX_CONCURRENT_STREAMS the requests of one connection, but not their product times 4 MiB:
// two HTTP/2 connections of one client, 100 streams each sending all but the last bytes of an OTLP
// export, held 800 MB, and a trickle keeps each stream inside its deadline.
//
// A request reserves, before its body is read, what it may hold: its Content-Length (capped at the
// route's limit, which refuses more anyway), or the route's whole limit when it declares none
// (chunked, or HTTP/2 without content-length); on the Connect and gRPC routes, which read their
// bodies as they arrive, a body of no stated length (every gRPC client's) reserves a first step
// and grows (growBodyReservation). The reservation ends with the response. Over the process's budget: 503 (gRPC UNAVAILABLE); over the client network's share:
// 429 (gRPC RESOURCE_EXHAUSTED); both with Retry-After, in the caller's protocol, the body unread
// (sendProblemToCaller: gRPC and Connect with a google.rpc.RetryInfo, the OTLP/HTTP receivers a
// google.rpc.Status in the export's encoding, everyone else problem+json).

/** Methods whose requests may carry a body the route reads. */
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * What a route's config may say: `{ bodyDrained: true }`, it never keeps its body (the gate);
 * `{ bodyGrowable: true }`, it reads its body as it arrives and grows the reservation of a body of
 * no stated length with growBodyReservation (the Connect and gRPC routes, src/http/connect-adapter.ts).
 */
export interface BodyBudgetRouteConfig {
  bodyDrained?: boolean;
  bodyGrowable?: boolean;
}

/**
 * What a growable body of no stated length reserves first, and the least it grows by: gRPC clients
 * send no Content-Length, and an OTLP/gRPC export reserving the route's 4 MiB before a byte was
 * read let a client network have eight in flight (an OpenTelemetry Collector runs ten export
 * workers by default).
 */
export const GROW_STEP_BYTES = 64 * 1024;

export interface BodyBudget {
  /** The process's budget in bytes. */
  readonly limit: number;
  /** One client network's share. */
  readonly perClient: number;
  /** Bytes reserved now, by all requests and by client network. */
  held(): { total: number; networks: number };
  /** Requests refused since start: over the process's budget, over a client network's share. */
  refused(): { total: number; perClient: number };
}

interface State {
  limit: number;
  perClient: number;
  total: number;
  byNetwork: Map<string, number>;
  refused: { total: number; perClient: number };
}

const kState = Symbol('bodyBudget');
const kBytes = Symbol('bodyBudgetBytes');
const kNetwork = Symbol('bodyBudgetNetwork');
const kCap = Symbol('bodyBudgetCap');
type Reserved = (http.ServerResponse | http2.Http2ServerResponse) & { [kState]?: State; [kBytes]?: number; [kNetwork]?: string; [kCap]?: number };

const OVER_BUDGET = 'the service holds as many request bodies as it may (HTTP_BODY_BUDGET_BYTES); retry shortly';
const OVER_SHARE = "this client network's request bodies in flight reach its share of HTTP_BODY_BUDGET_BYTES; send fewer at once, or retry once some are answered";

/** Why `n` more bytes cannot be reserved for `network` now, or null when they can. */
function overBy(s: State, network: string, n: number): 'unavailable' | 'rate_limited' | null {
  if (s.total + n > s.limit) {
    s.refused.total++;
    return 'unavailable';
  }
  if ((s.byNetwork.get(network) ?? 0) + n > s.perClient) {
    s.refused.perClient++;
    return 'rate_limited';
  }
  return null;
}

export interface BodyRefusal {
  problem: 'unavailable' | 'rate_limited';
  detail: string;
  /** Seconds, as the refusal before the body is read says them. */
  retryAfter: number;
}

/**
 * A growable reservation (a body of no stated length on a `bodyGrowable` route) grows to hold
 * `bytes` read so far: by at least GROW_STEP_BYTES or its own size, never past the route's limit
 * (the route refuses more anyway). Null when it holds them; a refusal when they would pass the
 * process's budget or the client network's share, which the route answers in its protocol, its
 * body unread (the reservation ends with the response as always). Responses of routes without a
 * reservation (no budget installed, a stated length) are never refused here.
 */
export function growBodyReservation(res: http.ServerResponse | http2.Http2ServerResponse, bytes: number): BodyRefusal | null {
  const r = res as Reserved;
  const held = r[kBytes];
  const cap = r[kCap];
  if (held === undefined || cap === undefined || bytes <= held || held >= cap) return null;
  const s = r[kState]!;
  const network = r[kNetwork]!;
  const target = Math.min(cap, Math.max(bytes, held + Math.max(GROW_STEP_BYTES, held)));
  const over = overBy(s, network, target - held);
  if (over !== null) return { problem: over, detail: over === 'unavailable' ? OVER_BUDGET : OVER_SHARE, retryAfter: 2 };
  s.total += target - held;
  addToNetwork(s.byNetwork, network, target - held);
  r[kBytes] = target;
  return null;
}

/** The response is gone (sent, or the client left): its request's reservation ends. Module level: one function for every request. */
function release(this: Reserved): void {
  const s = this[kState]!;
  const n = this[kBytes]!;
  const network = this[kNetwork]!;
  s.total -= n;
  addToNetwork(s.byNetwork, network, -n);
}

/** Bytes the request may hold: 0 when it has no body. */
function bytesOf(req: FastifyRequest, routeLimit: number): number {
  const declared = req.headers['content-length'];
  if (declared !== undefined) {
    const n = Number(declared);
    // A length that is no number (node's parsers refuse most) reserves what the route may hold.
    return n === 0 ? 0 : n > 0 ? Math.min(n, routeLimit) : routeLimit;
  }
  if (req.raw.httpVersionMajor === 2) return (req.raw as unknown as http2.Http2ServerRequest).stream.endAfterHeaders ? 0 : routeLimit;
  return req.headers['transfer-encoding'] === undefined ? 0 : routeLimit;
}

function refuse(req: FastifyRequest, reply: FastifyReply, problem: 'unavailable' | 'rate_limited', detail: string): void {
  const headers: Record<string, string> = { 'retry-after': '2' };
  // The body stays unread: on HTTP/1.1 the connection ends with the answer.
  if (req.raw.httpVersionMajor === 1) headers.connection = 'close';
  sendProblemToCaller(req, reply, problem, detail, headers);
}

/**
 * Installs the budget on every route that reads a body (a route-level onRequest hook, so GET
 * routes pay nothing). `defaultLimit` is BODY_LIMIT, for routes without a body limit of their own.
 * Start-up order: before the routes are added.
 */
export function installBodyBudget(app: FastifyInstance, opts: { limit: number; defaultLimit: number }): BodyBudget {
  const s: State = { limit: opts.limit, perClient: Math.max(Math.floor(opts.limit / 8), 1), total: 0, byNetwork: new Map(), refused: { total: 0, perClient: 0 } };
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!methods.some((m) => BODY_METHODS.has(m)) || (route.config as BodyBudgetRouteConfig | undefined)?.bodyDrained) return;
    const routeLimit = route.bodyLimit ?? opts.defaultLimit;
    const growable = (route.config as BodyBudgetRouteConfig | undefined)?.bodyGrowable === true;
    const hook = (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      let n = bytesOf(req, routeLimit);
      if (n === 0) return done();
      // A body of no stated length on a route that grows its reservation: a first step now.
      const grows = growable && n === routeLimit && req.headers['content-length'] === undefined;
      if (grows) n = Math.min(routeLimit, GROW_STEP_BYTES);
      const network = clientNetwork(req.ip);
      const over = overBy(s, network, n);
      if (over !== null) return refuse(req, reply, over, over === 'unavailable' ? OVER_BUDGET : OVER_SHARE);
      s.total += n;
      addToNetwork(s.byNetwork, network, n);
      const res = reply.raw as Reserved;
      res[kState] = s;
      res[kBytes] = n;
      res[kNetwork] = network;
      if (grows) res[kCap] = routeLimit;
      res.once('close', release);
      done();
    };
    route.onRequest = withRouteHook(route.onRequest, hook);
  });
  return {
    limit: s.limit,
    perClient: s.perClient,
    held: () => ({ total: s.total, networks: s.byNetwork.size }),
    refused: () => ({ ...s.refused }),
  };
}
