import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../routes.js';
import { sendProblem } from '../problem.js';

/** /healthz: the process is up. /readyz: the database answers (503 otherwise). */
export function systemRoutes(app: FastifyInstance, { db }: RouteDeps) {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    if (await db.ping()) return { status: 'ready', database: db.kind };
    return sendProblem(reply, 'unavailable', 'the database is not reachable', { headers: { 'retry-after': '2' } });
  });
}
