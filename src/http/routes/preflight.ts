import type { FastifyInstance } from 'fastify';
import { GetDemandRequestSchema, GetDemandResponseSchema, PreflightRequestSchema, PreflightResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import type { RouteDeps } from '../routes.js';
import { handedOver } from '../hand-over.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson, restJsonText } from '../rest-json.js';
import { parseLimit } from './trust.js';

export function preflightRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { target?: string } }>(
    '/v1/preflight',
    { schema: { querystring: restQuerySchema(PreflightRequestSchema) } },
    async (req, reply) => {
      // Most checks are answered before this route, by the thin adapter of src/http/fast-paths.ts;
      // one the service refused there arrives with the refusal, answered without asking again.
      const refused = handedOver(req.raw)?.refused;
      if (refused) throw refused.error;
      const res = await services.preflight.preflight({ target: req.query.target });
      // Every answer is a signed statement of this moment (shared by the checks of the same claim
      // within RECEIPT_SHARE_MS, docs/performance.md); never to be kept by an HTTP cache. A
      // shared answer is serialised once (restJsonText).
      reply.header('cache-control', 'no-store');
      return reply.type('application/json; charset=utf-8').send(restJsonText(PreflightResponseSchema, res));
    },
  );
  app.get<{ Querystring: { window?: string; cursor?: string; limit?: string } }>('/api/demand', { schema: { querystring: restQuerySchema(GetDemandRequestSchema) } }, async (req) =>
    restJson(GetDemandResponseSchema, await services.preflight.getDemand({ window: req.query.window, cursor: req.query.cursor, limit: parseLimit(req.query.limit) })),
  );
}
