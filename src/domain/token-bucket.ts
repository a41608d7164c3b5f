// Token buckets per client key (an address, or an address network): the one rate-limit mechanism
// of the service, used by the HTTP limits (src/http/rate-limit.ts) and the x402 chain look-up
// throttle. Pure: the clock is an argument; memory is bounded by evicting the least recently seen.

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
