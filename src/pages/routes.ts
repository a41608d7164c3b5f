// The human pages (SPEC 1.9): server-rendered HTML, no client script. They call the same service
// methods as the JSON API; an error a service raises becomes a readable HTML page with the same
// status the API would answer (400, 404, ...), never a stack trace.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { ObservatoryError, PROBLEMS } from '../errors.js';
import type { RouteDeps } from '../http/routes.js';
import { atlasReportPage } from './atlas.js';
import { html, SafeHtml } from './html.js';
import { page, type Section } from './layout.js';
import { monitorPage, serverPage } from './monitor.js';
import { driftPage } from './drift.js';
import { callContext } from '../services/context.js';

const stringQuery = (...names: string[]) => ({ type: 'object', properties: Object.fromEntries(names.map((n) => [n, { type: 'string' }])) }) as const;

/** Pages change with every report; a short private cache keeps reloads cheap without going stale. */
const PAGE_CACHE_CONTROL = 'no-cache';

async function render(reply: FastifyReply, section: Section, build: () => Promise<SafeHtml | { status: number; body: SafeHtml }>): Promise<FastifyReply> {
  reply.type('text/html; charset=utf-8').header('cache-control', PAGE_CACHE_CONTROL).header('x-content-type-options', 'nosniff');
  reply.header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'");
  try {
    const out = await build();
    return out instanceof SafeHtml ? reply.send(out.value) : reply.code(out.status).send(out.body.value);
  } catch (err) {
    if (!(err instanceof ObservatoryError)) throw err;
    const title = PROBLEMS[err.problem].title;
    return reply.code(err.status).send(page(title, section, html`<h1>${title}</h1><div class="notice err">${err.rawMessage}</div><p><a href="/monitor">Back to the monitor</a></p>`).value);
  }
}

export function pageRoutes(app: FastifyInstance, { services, config }: RouteDeps) {
  app.get<{ Querystring: { category?: string; window?: string; q?: string; verdict?: string; cursor?: string } }>(
    '/monitor',
    { schema: { querystring: stringQuery('category', 'window', 'q', 'verdict', 'cursor') } },
    (req, reply) => render(reply, 'monitor', () => monitorPage(services, req.query)),
  );
  app.get<{ Params: { slug: string } }>('/monitor/server/:slug', (req, reply) => render(reply, 'monitor', () => serverPage(services, config, req.params.slug)));
  app.get<{ Querystring: { server?: string } }>('/drift', { schema: { querystring: stringQuery('server') } }, (req, reply) =>
    // The form runs the same drift check as /api/drift: it counts against the caller's probes (rate limit, PROBE_CONCURRENCY).
    render(reply, 'drift', () => driftPage(services, req.query, callContext(req.headers, req.ip))),
  );
  app.get<{ Querystring: { category?: string; q?: string; verdict?: string; cursor?: string } }>(
    '/atlas/report',
    { schema: { querystring: stringQuery('category', 'q', 'verdict', 'cursor') } },
    (req, reply) => render(reply, 'atlas', () => atlasReportPage(services, req.query)),
  );
}
