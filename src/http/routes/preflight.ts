import type { FastifyInstance } from 'fastify';
import { GetDemandRequestSchema, GetDemandResponseSchema, PreflightRequestSchema, PreflightResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson } from '../rest-json.js';
import { parseLimit } from './trust.js';

export function preflightRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { target?: string } }>(
    '/v1/preflight',
    { schema: { querystring: restQuerySchema(PreflightRequestSchema) } },
    async (req, reply) => {
      const res = await services.preflight.preflight({ target: req.query.target });
      // Every answer is a fresh signed statement; never served from a cache.
      reply.header('cache-control', 'no-store');
      return restJson(PreflightResponseSchema, res);
    },
  );
  app.get<{ Querystring: { window?: string; cursor?: string; limit?: string } }>('/api/demand', { schema: { querystring: restQuerySchema(GetDemandRequestSchema) } }, async (req) =>
    restJson(GetDemandResponseSchema, await services.preflight.getDemand({ window: req.query.window, cursor: req.query.cursor, limit: parseLimit(req.query.limit) })),
  );
}
