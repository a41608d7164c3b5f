import type { FastifyInstance } from 'fastify';
import { GetAgentReadinessRequestSchema, GetAgentReadinessResponseSchema, GetDriftRequestSchema, GetDriftResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson } from '../rest-json.js';
import { callContext } from '../../services/context.js';


/** Live probes: tool-manifest drift and agent-readiness (SPEC 4.1). The caller's context carries its address: probes run within its share of PROBE_CONCURRENCY. */
export function probeRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { server?: string } }>('/api/drift', { schema: { querystring: restQuerySchema(GetDriftRequestSchema) } }, async (req) =>
    restJson(GetDriftResponseSchema, await services.drift.getDrift({ server: req.query.server }, callContext(req.headers, req.ip))),
  );
  app.get<{ Querystring: { url?: string } }>('/api/agent-readiness', { schema: { querystring: restQuerySchema(GetAgentReadinessRequestSchema) } }, async (req) =>
    restJson(GetAgentReadinessResponseSchema, await services.probes.getAgentReadiness({ url: req.query.url }, callContext(req.headers, req.ip))),
  );
}
