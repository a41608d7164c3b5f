import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../routes.js';

/** Discovery documents that cache well: a few minutes, so rotations propagate quickly. */
export const DISCOVERY_CACHE_CONTROL = 'public, max-age=300';

export function wellKnownRoutes(app: FastifyInstance, { services }: RouteDeps) {
  // The public keys that verify every receipt we ever issued (retired keys stay listed).
  app.get('/.well-known/jwks.json', async (_req, reply) => {
    reply.header('cache-control', DISCOVERY_CACHE_CONTROL);
    return services.keyring.jwks();
  });
}
