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
// (chunked, or HTTP/2 without content-length, as gRPC clients send). The reservation ends with the
// response. Over the process's budget: 503 (gRPC UNAVAILABLE); over the client network's share:
// 429 (gRPC RESOURCE_EXHAUSTED); both with Retry-After, in the caller's protocol, the body unread
// (sendProblemToCaller: gRPC and Connect with a google.rpc.RetryInfo, the OTLP/HTTP receivers a
// google.rpc.Status in the export's encoding, everyone else problem+json).

/** Methods whose requests may carry a body the route reads. */
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** What a route's config may say: `{ bodyDrained: true }`, it never keeps its body (the gate). */
export interface BodyBudgetRouteConfig {
  bodyDrained?: boolean;
}

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
type Reserved = (http.ServerResponse | http2.Http2ServerResponse) & { [kState]?: State; [kBytes]?: number; [kNetwork]?: string };

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
    const hook = (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      const n = bytesOf(req, routeLimit);
      if (n === 0) return done();
      if (s.total + n > s.limit) {
        s.refused.total++;
        return refuse(req, reply, 'unavailable', 'the service holds as many request bodies as it may (HTTP_BODY_BUDGET_BYTES); retry shortly');
      }
      const network = clientNetwork(req.ip);
      if ((s.byNetwork.get(network) ?? 0) + n > s.perClient) {
        s.refused.perClient++;
        return refuse(req, reply, 'rate_limited', "this client network's request bodies in flight reach its share of HTTP_BODY_BUDGET_BYTES; send fewer at once, or retry once some are answered");
      }
      s.total += n;
      addToNetwork(s.byNetwork, network, n);
      const res = reply.raw as Reserved;
      res[kState] = s;
      res[kBytes] = n;
      res[kNetwork] = network;
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
