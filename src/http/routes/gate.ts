import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendProblem } from '../problem.js';
import { callContext } from '../../services/context.js';
import { denialDetail, gateHeaders, type GateService } from '../../services/gate.js';

// /v1/gate and every path below it, any method (DECISIONS.md "Gateway decisions"): nginx
// auth_request sends a GET subrequest, Envoy's HTTP ext_authz appends the original path and may
// keep the original method. Allow is 200, deny 403 (problem+json with the decision), both with
// X-Trust-Verdict, X-Trust-Score and X-Trust-Receipt; no upstream is 400.

const GATE_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

function lowerHeaders(req: FastifyRequest): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(req.headers)) out[k.toLowerCase()] = Array.isArray(v) ? v[0] : v;
  return out;
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
      const headers = lowerHeaders(req);
      const suffix = req.params['*'];
      const o = await gate.decide(
        {
          // On /v1/gate the upstream headers are the gateway's own (DECISIONS.md "Gateway
          // decisions"): nginx overwrites them, Envoy's HTTP ext_authz forwards no client header
          // but those it is told to (docs/gateway.md).
          gatewayHeaders: headers,
          via: 'http',
          // Envoy HTTP ext_authz: Host is the original request's, the path is appended to /v1/gate.
          // Only ever an upstream through GATE_ROUTES (the contract names no header here).
          fallback: headers.host ? { host: headers.host, path: `/${suffix ?? ''}`, routeOnly: true } : undefined,
          // MCP 2026-07-28 request headers of the checked request (nginx passes the client's headers
          // to the auth subrequest; Envoy's HTTP ext_authz when listed in allowed_headers).
          mcpHeaders: { 'mcp-method': headers['mcp-method'], 'mcp-name': headers['mcp-name'] },
        },
        'http',
        callContext(req.headers, req.ip),
      );
      const decisionHeaders = gateHeaders(o);
      decisionHeaders['cache-control'] = 'no-store';
      if (o.allow) return reply.code(200).headers(decisionHeaders).send(gate.body(o));
      return sendProblem(reply, 'forbidden', denialDetail(o), {
        extra: gate.body(o),
        headers: decisionHeaders,
      });
    };
    // OPTIONS here is a gateway asking about an OPTIONS request, not a browser's CORS preflight:
    // the CORS hook (src/http/cors.ts) adds its headers but leaves the answer to the gate.
    // The body is drained unread (above): it holds no request body budget (src/http/body-budget.ts).
    const config = { cors: { preflight: false }, bodyDrained: true };
    scope.route({ method: [...GATE_METHODS], url: '/v1/gate', config, handler });
    scope.route({ method: [...GATE_METHODS], url: '/v1/gate/*', config, handler });
  });
}
