import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { DescMethod } from '@bufbuild/protobuf';
import type { Interceptor } from '@connectrpc/connect';
import { ConnectError } from '@connectrpc/connect';
import { TrustService } from '../../gen/observatory/v1/trust_pb.js';
import { ComplianceService } from '../../gen/observatory/v1/compliance_pb.js';
import { ReceiptService } from '../../gen/observatory/v1/receipt_pb.js';
import { ObservatoryError } from '../errors.js';
import { clientAddressKey } from '../services/context.js';
import { rateLimitHeaders, rateLimitMessage, type RateLimiter, type RateLimitName } from '../services/rate-limits.js';
import { sendProblem } from './problem.js';
import { handedOver } from './hand-over.js';
import { withRouteHook } from './route-hooks.js';

// Where the per-client limits of src/services/rate-limits.ts apply on HTTP. A limit belongs to a
// ROUTE, never to a spelling of a URL: REST routes are looked up by the route fastify matched
// (its pattern, e.g. "/v1/gate/*"), Connect/gRPC/gRPC-Web methods by their method descriptor. So
// "/v1/%70reflight", "/v1/preflight" and the Connect Preflight RPC all take from the same bucket,
// and any path the router would hand to a limited handler is limited.
// Elsewhere: the gate's gRPC Check (src/services/gate.ts answers a 429 denied_response), the MCP
// preflight_check tool and the A2A skills (src/agents/rate-limit.ts, per JSON-RPC call).

/** REST route patterns (as registered) and their limit. Every one must exist: checked at start-up. */
export const REST_RATE_LIMITS: ReadonlyMap<string, RateLimitName> = new Map<string, RateLimitName>([
  ['/api/drift', 'probes'],
  ['/api/agent-readiness', 'probes'],
  ['/api/agency-checklist', 'probes'],
  ['/api/compliance', 'probes'],
  ['/v1/compliance', 'probes'],
  ['/v1/preflight', 'preflight'],
  // Signs and stores a receipt (kept RECEIPT_RETENTION_DAYS) for any url=, tracked or not: the
  // same kind of call as a pre-flight, in the same bucket. test/receipt-writers.test.ts finds
  // every route and method that stores a receipt and requires each to be limited.
  ['/v1/erc8004-attestation', 'preflight'],
  // Signs without storing, but a signed evidence document costs about 0.4 ms of CPU (its trust
  // and benchmark reads, an Ed25519 signature): ten cached trust reads' worth, a page's worth.
  ['/v1/behavioral-evidence', 'preflight'],
  ['/v1/gate', 'gate'],
  ['/v1/gate/*', 'gate'],
  // Each may filter, sign and compress the whole catalogue (tens of MB at 100,000 servers).
  ['/v1/bundle', 'bundle'],
  // ClawHub skill trust: a slug not cached is a request to the registry (src/registry/clawhub.ts).
  ['/v1/trust', 'skill_trust'],
]);

/**
 * Routes whose requests with a non-empty value of this query parameter take from the `search`
 * bucket: the lists computed per request rather than served from a cached figure. A search (`q`)
 * over the servers without evidence reads the servers table (trigram-indexed where the database
 * has pg_trgm, migration 1570, issue 23); a page of one demand window (`/api/demand?window=`)
 * groups every target checked in it (its hourly sums, migration 1630). An anonymous client cycling
 * search texts or cursors is limited per client network like the other costly calls; the lists
 * without that parameter are not.
 */
export const SEARCH_RATE_LIMITED: ReadonlyMap<string, string> = new Map([
  ['/api/leaderboard', 'q'],
  ['/monitor', 'q'],
  ['/atlas/report', 'q'],
  ['/api/demand', 'window'],
]);

/** The same for Connect, gRPC and gRPC-Web: the method and its request field. */
const SEARCHED_METHODS: ReadonlyMap<DescMethod, string> = new Map<DescMethod, string>([
  [TrustService.method.getLeaderboard, 'q'],
  [TrustService.method.getDemand, 'window'],
]);

/**
 * Pages whose requests with this query parameter run a live probe, and take from the `probes`
 * bucket like the API routes that probe: `/drift?server=` is the same drift check as
 * `/api/drift?server=` (a probe of the server, a signed baseline), so a form must not be the way
 * around RATE_LIMIT_PROBES_PER_MINUTE.
 */
export const PROBING_PAGES: ReadonlyMap<string, string> = new Map([['/drift', 'server']]);

/**
 * The HTML pages: each request renders a page server-side (about 0.4-0.8 ms of CPU, plus the
 * database reads of its figures), many times what an API read costs, so an anonymous flood of
 * them is bounded per client network (`pages`, RATE_LIMIT_PAGES_PER_MINUTE). A page request that
 * searches or probes takes from that stricter bucket instead: one bucket per request.
 */
export const RATE_LIMITED_PAGES: ReadonlySet<string> = new Set(['/monitor', '/monitor/server/:slug', '/drift', '/atlas/report']);

/** Whether a request's `q` asks for a search, or its `window` for a page (the list code ignores a blank one). */
export const isSearch = (q: unknown): boolean => (typeof q === 'string' ? q.trim() !== '' : Array.isArray(q) ? q.some(isSearch) : false);

/** Connect/gRPC/gRPC-Web methods and their limit (the same buckets as their REST twins). */
export const CONNECT_RATE_LIMITS: ReadonlyMap<DescMethod, RateLimitName> = new Map<DescMethod, RateLimitName>([
  [TrustService.method.getDrift, 'probes'],
  [TrustService.method.getAgentReadiness, 'probes'],
  [ComplianceService.method.getComplianceExport, 'probes'],
  [ComplianceService.method.getAgencyChecklist, 'probes'],
  [ComplianceService.method.getComplianceAttestation, 'probes'],
  [TrustService.method.preflight, 'preflight'],
  [ReceiptService.method.getErc8004Attestation, 'preflight'],
  [ReceiptService.method.getBehavioralEvidence, 'preflight'],
  [TrustService.method.getSkillTrust, 'skill_trust'],
]);

/**
 * Installs the REST limits: every response of a limited route carries RateLimit and
 * RateLimit-Policy; an empty bucket answers 429 problem+json with Retry-After before the handler
 * (or the body parser) runs. Start-up fails if a listed route was never registered, so renaming
 * a route cannot silently drop its limit. Another server of the same service (the bundle gate)
 * names its own routes: what it does not name, it has none of.
 */
export function installRateLimits(
  app: FastifyInstance,
  limits: RateLimiter,
  routes: {
    table: ReadonlyMap<string, RateLimitName>;
    searched: ReadonlyMap<string, string>;
    probing: ReadonlyMap<string, string>;
    pages: ReadonlySet<string>;
  } = { table: REST_RATE_LIMITS, searched: SEARCH_RATE_LIMITED, probing: PROBING_PAGES, pages: RATE_LIMITED_PAGES },
) {
  const { table, searched, probing, pages } = routes;
  const registered = new Set<string>();
  // The hook goes only on the routes that have a limit, so the others (most of them) pay nothing.
  // Route-level onRequest hooks run after the application's, so a 429 carries the request id.
  app.addHook('onRoute', (opts) => {
    registered.add(opts.url);
    const fixed = table.get(opts.url);
    const probeParam = probing.get(opts.url);
    const searchParam = searched.get(opts.url);
    const page = pages.has(opts.url);
    if (fixed === undefined && searchParam === undefined && probeParam === undefined && !page) return;
    const hook = (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
      const query = req.query as Record<string, unknown> | undefined;
      const name =
        fixed ??
        (searchParam !== undefined && isSearch(query?.[searchParam]) ? 'search' : probeParam !== undefined && query?.[probeParam] !== undefined ? 'probes' : page ? 'pages' : undefined);
      if (name === undefined) return done();
      // A request the fast path handed over (src/http/fast-paths.ts) has taken its token there.
      const taken = handedOver(req.raw)?.rate;
      const d = taken !== undefined ? taken : limits.take(name, req.ip);
      if (!d) return done();
      reply.headers(rateLimitHeaders(d));
      if (!d.allowed) {
        sendProblem(reply, 'rate_limited', rateLimitMessage(d));
        return;
      }
      done();
    };
    opts.onRequest = withRouteHook(opts.onRequest, hook);
  });
  app.addHook('onReady', async () => {
    const missing = [...table.keys(), ...searched.keys(), ...probing.keys(), ...pages].filter((url) => !registered.has(url));
    if (missing.length > 0) throw new Error(`rate limits name routes that do not exist: ${missing.join(', ')}`);
  });
}

/**
 * The same limits for Connect, gRPC and gRPC-Web, by method descriptor: RateLimit headers on the
 * answer, RESOURCE_EXHAUSTED (HTTP 429 on Connect) with Retry-After when the bucket is empty.
 */
export function rateLimitInterceptor(limits: RateLimiter, table: ReadonlyMap<DescMethod, RateLimitName> = CONNECT_RATE_LIMITS): Interceptor {
  return (next) => async (req) => {
    const field = req.stream ? undefined : SEARCHED_METHODS.get(req.method);
    const name = table.get(req.method) ?? (field !== undefined && isSearch((req.message as Record<string, unknown>)[field]) ? 'search' : undefined);
    if (name === undefined) return next(req);
    const d = limits.take(name, req.contextValues.get(clientAddressKey));
    if (!d) return next(req);
    const headers = rateLimitHeaders(d);
    if (!d.allowed) throw new ObservatoryError('rate_limited', rateLimitMessage(d), { headers });
    try {
      const res = await next(req);
      for (const [k, v] of Object.entries(headers)) res.header.set(k, v);
      return res;
    } catch (err) {
      if (err instanceof ConnectError) for (const [k, v] of Object.entries(headers)) err.metadata.set(k, v);
      throw err;
    }
  };
}
