// Token buckets per client key (an address, or an address network): the one rate-limit mechanism
// of the service, used by the HTTP limits (src/http/rate-limit.ts), the A2A task storage allowance
// and the x402 chain look-up throttle. Pure: the clock is an argument; memory is bounded by
// evicting the least recently seen.

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * A token bucket store: capacity = `quota`, refilled continuously at `quota` per `windowMs`
 * (default a minute). A take may cost more than one token (bytes, for an allowance of bytes).
 */
export function createTokenBuckets(quota: number, opts: { now?: () => number; maxClients?: number; windowMs?: number } = {}) {
  const now = opts.now ?? (() => Date.now());
  const maxClients = opts.maxClients ?? 100_000;
  const ratePerMs = quota / (opts.windowMs ?? 60_000);

  const buckets = new Map<string, Bucket>();

  function refill(b: Bucket, t: number) {
    b.tokens = Math.min(quota, b.tokens + (t - b.at) * ratePerMs);
    b.at = t;
  }

  return {
    /**
     * Takes `cost` tokens (default 1; more than the quota counts as the whole quota) for the
     * client when it has them; returns the decision and the header figures.
     */
    take(client: string, cost = 1): { allowed: boolean; remaining: number; resetSeconds: number; retryAfterSeconds: number } {
      const t = now();
      const need = Math.min(Math.max(cost, 0), quota);
      let b = buckets.get(client);
      if (b) {
        refill(b, t);
        buckets.delete(client); // re-insert: Map order is then least-recently-used first
      } else {
        b = { tokens: quota, at: t };
        if (buckets.size >= maxClients) {
          // Evict the least recently seen client (first in insertion order): memory stays bounded.
          const oldest = buckets.keys().next().value;
          if (oldest !== undefined) buckets.delete(oldest);
        }
      }
      buckets.set(client, b);
      const allowed = b.tokens >= need;
      if (allowed) b.tokens -= need;
      const remaining = Math.floor(b.tokens);
      // Seconds until the bucket is full again, and until this take would be allowed.
      const resetSeconds = Math.ceil((quota - b.tokens) / ratePerMs / 1000);
      const retryAfterSeconds = allowed ? 0 : Math.max(1, Math.ceil((need - b.tokens) / ratePerMs / 1000));
      return { allowed, remaining, resetSeconds, retryAfterSeconds };
    },
    size: () => buckets.size,
  };
}
