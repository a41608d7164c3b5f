import type { FastifyInstance } from 'fastify';
import {
  GetBenchmarkResponseSchema,
  GetLeaderboardResponseSchema,
  GetSlaTierResponseSchema,
  GetStatsResponseSchema,
  GetTrustDeltaResponseSchema,
  GetTrustResponseSchema,
  GetTrustRequestSchema,
  GetLeaderboardRequestSchema,
  GetSlaTierRequestSchema,
  GetTrustDeltaRequestSchema,
  GetBadgeRequestSchema,
} from '../../../gen/observatory/v1/trust_pb.js';
import { invalidArgument } from '../../errors.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson, restJsonText } from '../rest-json.js';
import { handedOver } from '../hand-over.js';

// Query schemas come from the request messages (src/http/contract-schema.ts): strings only, the
// contract's rules decide in the service, so REST and Connect reject the same inputs.

/** Badges change at most as often as scores are recomputed; a few minutes of caching is safe. */
export const BADGE_CACHE_CONTROL = 'public, max-age=300';

export function parseLimit(raw: string | undefined, max = 100): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d{1,6}$/.test(raw)) throw invalidArgument(`limit must be an integer from 1 to ${max}`);
  return Number(raw);
}

export function trustRoutes(app: FastifyInstance, { services }: RouteDeps) {
  const trust = services.trust;

  // getTrust hands out one response object per computation (cached for SCORE_CACHE_MS), so its
  // JSON text is built once per computation too. Most reads are answered before this route, by
  // the thin adapter of src/http/fast-paths.ts; a read the service refused there arrives with the
  // refusal, answered here without asking again.
  app.get<{ Querystring: { url?: string } }>('/api/trust', { schema: { querystring: restQuerySchema(GetTrustRequestSchema) } }, async (req, reply) => {
    const refused = handedOver(req.raw)?.refused;
    if (refused) throw refused.error;
    return reply.type('application/json; charset=utf-8').send(restJsonText(GetTrustResponseSchema, await trust.getTrust({ url: req.query.url })));
  });

  app.get<{ Querystring: { category?: string; limit?: string; cursor?: string; q?: string; verdict?: string } }>(
    '/api/leaderboard',
    { schema: { querystring: restQuerySchema(GetLeaderboardRequestSchema) } },
    async (req) =>
      restJson(
        GetLeaderboardResponseSchema,
        await trust.getLeaderboard({ category: req.query.category, limit: parseLimit(req.query.limit), cursor: req.query.cursor, q: req.query.q, verdict: req.query.verdict }),
      ),
  );

  app.get('/api/stats', async () => restJson(GetStatsResponseSchema, await trust.getStats({})));

  app.get<{ Params: { server_slug: string } }>('/benchmark/:server_slug', async (req) =>
    restJson(GetBenchmarkResponseSchema, await trust.getBenchmark({ serverSlug: req.params.server_slug })),
  );

  app.get<{ Querystring: { server?: string } }>('/api/sla-tier', { schema: { querystring: restQuerySchema(GetSlaTierRequestSchema) } }, async (req) =>
    restJson(GetSlaTierResponseSchema, await trust.getSlaTier({ server: req.query.server })),
  );

  app.get<{ Querystring: { window?: string; list?: string; cursor?: string; limit?: string } }>('/api/trust-delta', { schema: { querystring: restQuerySchema(GetTrustDeltaRequestSchema) } }, async (req) =>
    restJson(
      GetTrustDeltaResponseSchema,
      await trust.getTrustDelta({ window: req.query.window, list: req.query.list, cursor: req.query.cursor, limit: parseLimit(req.query.limit, 1000) }),
    ),
  );

  app.get<{ Querystring: { url?: string } }>('/api/badge', { schema: { querystring: restQuerySchema(GetBadgeRequestSchema) } }, async (req, reply) => {
    const badge = await trust.getBadge({ url: req.query.url });
    return reply.type('image/svg+xml; charset=utf-8').header('cache-control', BADGE_CACHE_CONTROL).send(badge.svg);
  });
}
