import type { Config } from '../config.js';
import { clientNetwork } from '../domain/client-network.js';
import { createTokenBuckets } from '../domain/token-bucket.js';

// Per-client rate limits for the calls that cost the most (docs/reliability.md "Rate limits"):
// token buckets per client address, in this process's memory (with N instances a client gets up
// to N times a limit; docs/deployment.md). One limiter serves every door: the REST routes (by
// matched route, src/http/rate-limit.ts), the Connect/gRPC methods (by method descriptor, same
// file), the gRPC gate Check (src/services/gate.ts), the MCP preflight_check tool and the A2A
// skills (src/agents/rate-limit.ts). No door looks at how a URL was spelled.

/**
 * The limits; each has its own buckets and its own setting (RATE_LIMIT_*_PER_MINUTE; the A2A
 * task storage allowance A2A_TASK_BYTES_PER_CLIENT_PER_DAY).
 */
export type RateLimitName = 'probes' | 'preflight' | 'gate' | 'mcp_preflight' | 'a2a_skills' | 'a2a_reads' | 'a2a_task_bytes' | 'bundle' | 'search' | 'pages' | 'skill_trust';

/** What one limit allows: `quota` tokens per client per `windowSeconds`, refilled continuously; 0 = off. */
export interface RateLimitPolicy {
  name: RateLimitName;
  quota: number;
  /** 60 for the per-minute limits, 86,400 for the daily storage allowance. */
  windowSeconds: number;
  /** What is counted, for messages ("pre-flight requests", "A2A skill invocations"). */
  what: string;
}

export type RateLimitConfig = Pick<
  Config,
    | 'rateLimitProbesPerMinute'
  | 'rateLimitPreflightPerMinute'
  | 'rateLimitGatePerMinute'
  | 'rateLimitMcpPreflightPerMinute'
  | 'rateLimitA2aSkillsPerMinute'
  | 'rateLimitA2aReadsPerMinute'
  | 'a2aTaskBytesPerClientPerDay'
  | 'rateLimitBundlePerMinute'
  | 'rateLimitSearchPerMinute'
  | 'rateLimitPagesPerMinute'
  | 'rateLimitSkillTrustPerMinute'
>;

export function rateLimitPolicies(config: RateLimitConfig): Record<RateLimitName, RateLimitPolicy> {
  return {
    probes: { name: 'probes', quota: config.rateLimitProbesPerMinute, windowSeconds: 60, what: 'probe requests' },
    preflight: { name: 'preflight', quota: config.rateLimitPreflightPerMinute, windowSeconds: 60, what: 'pre-flight requests' },
    gate: { name: 'gate', quota: config.rateLimitGatePerMinute, windowSeconds: 60, what: 'gate decisions' },
    mcp_preflight: { name: 'mcp_preflight', quota: config.rateLimitMcpPreflightPerMinute, windowSeconds: 60, what: 'MCP preflight_check calls' },
    a2a_skills: { name: 'a2a_skills', quota: config.rateLimitA2aSkillsPerMinute, windowSeconds: 60, what: 'A2A skill invocations' },
    a2a_reads: { name: 'a2a_reads', quota: config.rateLimitA2aReadsPerMinute, windowSeconds: 60, what: 'A2A task reads' },
    a2a_task_bytes: { name: 'a2a_task_bytes', quota: config.a2aTaskBytesPerClientPerDay, windowSeconds: 86_400, what: 'bytes of A2A tasks stored (A2A_TASK_BYTES_PER_CLIENT_PER_DAY)' },
    bundle: { name: 'bundle', quota: config.rateLimitBundlePerMinute, windowSeconds: 60, what: 'bundle requests' },
    search: { name: 'search', quota: config.rateLimitSearchPerMinute, windowSeconds: 60, what: 'searched list requests' },
    pages: { name: 'pages', quota: config.rateLimitPagesPerMinute, windowSeconds: 60, what: 'page requests' },
    skill_trust: { name: 'skill_trust', quota: config.rateLimitSkillTrustPerMinute, windowSeconds: 60, what: 'skill trust requests' },
  };
}

// The buckets themselves: src/domain/token-bucket.ts (pure, shared with the x402 look-up throttle).
export { createTokenBuckets };

/** One call counted against one limit. */
export interface RateDecision {
  policy: RateLimitPolicy;
  allowed: boolean;
  remaining: number;
  resetSeconds: number;
  /** 0 when allowed. */
  retryAfterSeconds: number;
}

/**
 * The bucket a client address falls in. Every door keys its limits through this one function,
 * so a change of keying (e.g. one bucket per IPv6 /64) applies to all of them at once.
 */
export function rateLimitKey(clientAddress: string | undefined): string {
  // One bucket per client network (IPv4 address, IPv6 /64), the unit report sources use.
  return clientAddress === undefined ? '' : clientNetwork(clientAddress);
}

export function createRateLimiter(config: RateLimitConfig, opts: { now?: () => number } = {}) {
  const policies = rateLimitPolicies(config);
  const stores = new Map<RateLimitName, ReturnType<typeof createTokenBuckets>>();
  for (const p of Object.values(policies)) if (p.quota > 0) stores.set(p.name, createTokenBuckets(p.quota, { ...opts, windowMs: p.windowSeconds * 1000 }));
  return {
    policies,
    /** Counts one call (or `cost` units: bytes) of the client against a limit; null when that limit is off. */
    take(name: RateLimitName, clientAddress: string | undefined, cost = 1): RateDecision | null {
      const store = stores.get(name);
      if (!store) return null;
      return { policy: policies[name], ...store.take(rateLimitKey(clientAddress), cost) };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;

/** The RateLimit-Policy header of a decision (draft-ietf-httpapi-ratelimit-headers). */
export const rateLimitPolicy = (d: RateDecision): string => `"${d.policy.name}";q=${d.policy.quota};w=${d.policy.windowSeconds}`;
/** The RateLimit header of a decision: what remains and when the window resets. */
export const rateLimitState = (d: RateDecision): string => `"${d.policy.name}";r=${d.remaining};t=${d.resetSeconds}`;

/**
 * RateLimit and RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers, structured fields: quota
 * q per window w seconds; remaining r and seconds t until the quota is restored), and
 * Retry-After on a refusal. Names are lower-case (HTTP/2 and gRPC metadata want them so).
 */
export function rateLimitHeaders(d: RateDecision): Record<string, string> {
  const h: Record<string, string> = { 'ratelimit-policy': rateLimitPolicy(d), ratelimit: rateLimitState(d) };
  if (!d.allowed) h['retry-after'] = String(d.retryAfterSeconds);
  return h;
}

/** The one wording of a refusal, whatever the door. */
export function rateLimitMessage(d: RateDecision): string {
  const per = d.policy.windowSeconds === 60 ? 'minute' : d.policy.windowSeconds === 86_400 ? 'day' : `${d.policy.windowSeconds} s`;
  return `rate limited: at most ${d.policy.quota} ${d.policy.what} per ${per} from one address; retry in ${d.retryAfterSeconds} s`;
}
