import type { FastifyInstance } from 'fastify';
import { GetDemandResponseSchema, PreflightRequestSchema, PreflightResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson } from '../rest-json.js';

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
  app.get('/api/demand', async () => restJson(GetDemandResponseSchema, await services.preflight.getDemand({})));
}
