import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Config } from '../config.js';
import { clientNetwork } from '../domain/client-network.js';
import { sendProblem } from './problem.js';

// Token buckets per client address for the expensive endpoints: the probes (they fetch a remote
// target) and pre-flight (it may sign a receipt). Buckets live in this process's memory, so with
// N instances behind a load balancer a client gets up to N times the limit (docs/deployment.md).
// Routes are matched by URL path, so a probe route answers with the limit whichever module
// registers it, and the 501 placeholders are limited exactly like the real handlers will be.

export interface RatePolicy {
  /** Name in the RateLimit / RateLimit-Policy headers. */
  name: string;
  /** Tokens per minute; 0 turns the policy off. */
  perMinute: number;
  /** Paths (exact, without query) the policy covers. */
  paths: readonly string[];
}

export function ratePolicies(config: Pick<Config, 'rateLimitProbesPerMinute' | 'rateLimitPreflightPerMinute'>): RatePolicy[] {
  return [
    {
      name: 'probes',
      perMinute: config.rateLimitProbesPerMinute,
      paths: [
        '/api/drift',
        '/api/agent-readiness',
        '/api/agency-checklist',
        '/api/compliance',
        '/v1/compliance',
        // The same probes over Connect / gRPC / gRPC-Web.
        '/observatory.v1.TrustService/GetDrift',
        '/observatory.v1.TrustService/GetAgentReadiness',
        '/observatory.v1.ComplianceService/GetComplianceExport',
        '/observatory.v1.ComplianceService/GetAgencyChecklist',
        '/observatory.v1.ComplianceService/GetComplianceAttestation',
      ],
    },
    {
      name: 'preflight',
      perMinute: config.rateLimitPreflightPerMinute,
      paths: ['/v1/preflight', '/observatory.v1.TrustService/Preflight'],
    },
  ];
}

interface Bucket {
  tokens: number;
  at: number;
}

/** A token bucket store: capacity = perMinute, refilled continuously at perMinute per 60 s. */
export function createTokenBuckets(perMinute: number, opts: { now?: () => number; maxClients?: number } = {}) {
  const now = opts.now ?? (() => Date.now());
  const maxClients = opts.maxClients ?? 100_000;
  const buckets = new Map<string, Bucket>();
  const ratePerMs = perMinute / 60_000;

  function refill(b: Bucket, t: number) {
    b.tokens = Math.min(perMinute, b.tokens + (t - b.at) * ratePerMs);
    b.at = t;
  }

  return {
    /** Takes one token for the client; returns the decision and the header figures. */
    take(client: string): { allowed: boolean; remaining: number; resetSeconds: number; retryAfterSeconds: number } {
      const t = now();
      let b = buckets.get(client);
      if (b) {
        refill(b, t);
        buckets.delete(client); // re-insert: Map order is then least-recently-used first
      } else {
        b = { tokens: perMinute, at: t };
        if (buckets.size >= maxClients) {
          // Evict the least recently seen client (first in insertion order): memory stays bounded.
          const oldest = buckets.keys().next().value;
          if (oldest !== undefined) buckets.delete(oldest);
        }
      }
      buckets.set(client, b);
      const allowed = b.tokens >= 1;
      if (allowed) b.tokens -= 1;
      const remaining = Math.floor(b.tokens);
      // Seconds until the bucket is full again, and until one token is available.
      const resetSeconds = Math.ceil((perMinute - b.tokens) / ratePerMs / 1000);
      const retryAfterSeconds = allowed ? 0 : Math.max(1, Math.ceil((1 - b.tokens) / ratePerMs / 1000));
      return { allowed, remaining, resetSeconds, retryAfterSeconds };
    },
    size: () => buckets.size,
  };
}

/** Installs the limits: every response of a covered path carries RateLimit and RateLimit-Policy. */
export function installRateLimits(app: FastifyInstance, policies: readonly RatePolicy[], opts: { now?: () => number } = {}) {
  const byPath = new Map<string, { policy: RatePolicy; buckets: ReturnType<typeof createTokenBuckets> }>();
  for (const policy of policies) {
    if (policy.perMinute <= 0) continue;
    const entry = { policy, buckets: createTokenBuckets(policy.perMinute, opts) };
    for (const p of policy.paths) byPath.set(p, entry);
  }
  if (byPath.size === 0) return;
  app.addHook('onRequest', async (req, reply: FastifyReply) => {
    if (req.method === 'OPTIONS') return; // CORS pre-flights cost nothing
    const q = req.url.indexOf('?');
    const path = q === -1 ? req.url : req.url.slice(0, q);
    const entry = byPath.get(path.length > 1 ? path.replace(/\/+$/, '') : path);
    if (!entry) return;
    const { policy, buckets } = entry;
    // One bucket per client network (IPv4 address, IPv6 /64), the unit report sources use.
    const d = buckets.take(clientNetwork(req.ip));
    // draft-ietf-httpapi-ratelimit-headers (structured fields): quota q per window w seconds;
    // remaining r and seconds t until the quota is restored.
    reply.header('ratelimit-policy', `"${policy.name}";q=${policy.perMinute};w=60`);
    reply.header('ratelimit', `"${policy.name}";r=${d.remaining};t=${d.resetSeconds}`);
    if (!d.allowed) {
      return sendProblem(reply, 'rate_limited', `at most ${policy.perMinute} ${policy.name} requests per minute from one address; retry in ${d.retryAfterSeconds} s`, {
        headers: { 'retry-after': String(d.retryAfterSeconds) },
      });
    }
  });
}
