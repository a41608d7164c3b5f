import type { FastifyInstance } from 'fastify';
import { GetTrustResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import type { RouteDeps } from '../routes.js';
import { restJson } from '../rest-json.js';

const urlQuery = {
  type: 'object',
  properties: { url: { type: 'string' } },
} as const;

export function trustRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { url?: string } }>('/api/trust', { schema: { querystring: urlQuery } }, async (req) =>
    restJson(GetTrustResponseSchema, await services.trust.getTrust({ url: req.query.url })),
  );
}
