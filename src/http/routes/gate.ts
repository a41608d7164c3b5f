import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendProblem } from '../problem.js';
import { handedOver } from '../hand-over.js';
import { isSingleValued, UPSTREAM_HEADERS, type GateRequestInfo } from '../../domain/gate.js';
import { denialDetail, gateHeaders, type GateOutcome, type GateService } from '../../services/gate.js';

// /v1/gate and every path below it, any method (DECISIONS.md "Gateway decisions"): nginx
// auth_request sends a GET subrequest, Envoy's HTTP ext_authz appends the original path and may
// keep the original method. Allow is 200, deny 403 (problem+json with the decision), both with
// X-Trust-Verdict, X-Trust-Score and X-Trust-Receipt; no upstream is 400.
// The gateway's plain `GET /v1/gate` is answered, when allowed, by the thinner adapter of
// src/http/fast-paths.ts with the same reading of the request (`httpGateRequest`) and the same
// headers (`gateAnswerHeaders`); a denial or refusal it found arrives here with the request.

const GATE_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

/** A header's value as the gate reads it; a repeated one is refused (`repeatedHeaders`), whatever is read here. */
const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/**
 * The single-valued headers (SINGLE_VALUED_HEADERS) a request carries on more than one line.
 * node joins such lines with ", " (and keeps only the first Host), so its parsed headers cannot
 * tell; the raw list can. One pass over it, no allocation for a request without repeats.
 */
export function repeatedHeaders(rawHeaders: readonly string[]): string[] {
  let seen: string[] | undefined;
  let repeated: string[] | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (!isSingleValued(name)) continue;
    if (seen === undefined) seen = [];
    if (!seen.includes(name)) seen.push(name);
    else if (repeated === undefined) repeated = [name];
    else if (!repeated.includes(name)) repeated.push(name);
  }
  return repeated ?? [];
}

/** The gate's question in an HTTP request: its headers and the path below /v1/gate. */
export function httpGateRequest(req: Pick<IncomingMessage, 'headers' | 'rawHeaders'>, suffix: string | undefined): GateRequestInfo {
  const { headers } = req;
  // On /v1/gate the upstream headers are the gateway's own (DECISIONS.md "Gateway decisions"):
  // nginx overwrites them, Envoy's HTTP ext_authz forwards no client header but those it is told
  // to (docs/gateway.md).
  const gatewayHeaders: Record<string, string | undefined> = {};
  for (const name of UPSTREAM_HEADERS) gatewayHeaders[name] = one(headers[name]);
  const host = one(headers.host);
  return {
    gatewayHeaders,
    via: 'http',
    // Envoy HTTP ext_authz: Host is the original request's, the path is appended to /v1/gate.
    // Only ever an upstream through GATE_ROUTES (the contract names no header here).
    fallback: host ? { host, path: `/${suffix ?? ''}`, routeOnly: true } : undefined,
    // MCP 2026-07-28 request headers of the checked request (nginx passes the client's headers
    // to the auth subrequest; Envoy's HTTP ext_authz when listed in allowed_headers).
    mcpHeaders: { 'mcp-method': one(headers['mcp-method']), 'mcp-name': one(headers['mcp-name']) },
    // Lines node joined (or dropped, for Host): refused, never read as one value.
    repeated: repeatedHeaders(req.rawHeaders),
  };
}

/** The headers of a decision's HTTP answer, allow and deny alike: the verdict's and no-store. */
export function gateAnswerHeaders(o: GateOutcome): Record<string, string> {
  const h = gateHeaders(o);
  h['cache-control'] = 'no-store';
  return h;
}

/** Both the full service and the database-less bundle gate (src/bundle-gate.ts) mount these routes. */
export function gateRoutes(app: FastifyInstance, { services }: { services: { gate: GateService } }) {
  const { gate } = services;
  app.register(async (scope) => {
    // The body of the request under check is never read (nginx sends none; Envoy may forward
    // the original one): drained unparsed, whatever its type, so no body can make a 400 or 415.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => {
      payload.on('error', done);
      payload.on('end', () => done(null, undefined));
      payload.resume();
    });

    const handler = async (req: FastifyRequest<{ Params: { '*'?: string } }>, reply: FastifyReply) => {
      const handed = handedOver(req.raw);
      if (handed?.refused) throw handed.refused.error;
      const o = handed?.outcome ?? (await gate.decide(httpGateRequest(req.raw, req.params['*']), 'http'));
      const headers = gateAnswerHeaders(o);
      if (o.allow) return reply.code(200).headers(headers).type('application/json; charset=utf-8').send(gate.bodyText(o));
      return sendProblem(reply, 'forbidden', denialDetail(o), { extra: gate.body(o), headers });
    };
    // OPTIONS here is a gateway asking about an OPTIONS request, not a browser's CORS preflight:
    // the CORS hook (src/http/cors.ts) adds its headers but leaves the answer to the gate.
    // The body is drained unread (above): it holds no request body budget (src/http/body-budget.ts).
    const config = { cors: { preflight: false }, bodyDrained: true };
    scope.route({ method: [...GATE_METHODS], url: '/v1/gate', config, handler });
    scope.route({ method: [...GATE_METHODS], url: '/v1/gate/*', config, handler });
  });
}
