import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../routes.js';
import { sendProblem } from '../problem.js';

// Paths of SPEC.md section 4 whose handlers are not built yet. They answer 501 problem+json,
// never fake data; each line is removed when its real route lands.
export const PENDING: ReadonlyArray<readonly [method: 'GET' | 'POST', url: string]> = [
];

export function pendingRoutes(app: FastifyInstance, _deps: RouteDeps) {
  for (const [method, url] of PENDING) {
    app.route({
      method,
      url,
      handler: (req, reply) => sendProblem(reply, 'unimplemented', `${method} ${url} is part of the interface but not implemented yet`),
    });
  }
}
