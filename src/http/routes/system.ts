import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../routes.js';
import { sendProblem } from '../problem.js';

/**
 * /healthz: the process is up and, with the embedded database, that database still finishes
 * statements (a bounded probe: a wedged PGlite is a fault of this process, which only a restart
 * cures, so the supervisor must see it). /readyz: the database answers within READY_TIMEOUT_MS
 * (503 otherwise, never later): a database that holds its tables or stops answering is not ready.
 */
export const READY_TIMEOUT_MS = 2000;

export function systemRoutes(app: FastifyInstance, { db }: RouteDeps) {
  app.get('/healthz', async (_req, reply) => {
    if (!db.liveness) return { status: 'ok' };
    const l = await db.liveness();
    if (l.live) return { status: 'ok' };
    return sendProblem(reply, 'unavailable', `not live: ${l.reason}; restart the process`);
  });
  app.get('/readyz', async (_req, reply) => {
    // Both probes are bounded: the embedded database's liveness (a wedged PGlite would hold a plain
    // ping for ever), PostgreSQL's ping (a read of servers, within READY_TIMEOUT_MS).
    const ok = db.liveness ? (await db.liveness()).live : await db.ping(READY_TIMEOUT_MS);
    if (ok) return { status: 'ready', database: db.kind };
    return sendProblem(reply, 'unavailable', 'the database is not reachable', { headers: { 'retry-after': '2' } });
  });
}
