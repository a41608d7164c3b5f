import { addToNetwork, networkShare } from '../domain/client-network.js';
import { ObservatoryError } from '../errors.js';
import { clientAddressKey, type CallContext } from './context.js';
import { rateLimitKey } from './rate-limits.js';

// On-demand probes running at once (docs/reliability.md "Rate limits"): a drift check, the
// agent-readiness probe, the agency checklist and the attestation each hold outbound sockets for
// up to their deadline (20 s for a manifest) and up to a few MiB of what the target sent.
// RATE_LIMIT_PROBES_PER_MINUTE bounds how many a client starts per minute, not how many run: a
// target that answers slowly keeps each for its whole deadline, and every client network starts
// its own. These bound the probes running in this process (PROBE_CONCURRENCY) and per client
// network (an eighth of it, at least 2); beyond, the call is refused before a packet leaves:
// 429 for the client's share, 503 for the process, both with Retry-After. Active observation has
// its own bound (OBSERVE_CONCURRENCY) and is not counted here.

/** Seconds a refused caller is told to wait: about the time a slow probe keeps its slot. */
const RETRY_AFTER_SECONDS = '5';

export interface ProbeSlots {
  /** Runs `probe` in a slot of the caller's client network, or throws 429/503 without running it. */
  run<T>(ctx: CallContext | undefined, probe: () => Promise<T>): Promise<T>;
  /** Probes running now (tests, metrics). */
  running(): number;
}

/** The per-client-network share of PROBE_CONCURRENCY. */
export function probesPerClient(total: number): number {
  return networkShare(total);
}

export function createProbeSlots(total: number, perClient = probesPerClient(total)): ProbeSlots {
  let running = 0;
  const byClient = new Map<string, number>();
  return {
    async run(ctx, probe) {
      const key = rateLimitKey(ctx?.values.get(clientAddressKey));
      const mine = byClient.get(key) ?? 0;
      if (mine >= perClient) {
        throw new ObservatoryError('rate_limited', `this client network already has ${perClient} probes running (its share of PROBE_CONCURRENCY); retry once one has answered`, {
          headers: { 'retry-after': RETRY_AFTER_SECONDS },
        });
      }
      if (running >= total) {
        throw new ObservatoryError('unavailable', `${total} probes are running in this instance (PROBE_CONCURRENCY); retry shortly`, { headers: { 'retry-after': RETRY_AFTER_SECONDS } });
      }
      running++;
      addToNetwork(byClient, key, 1);
      try {
        return await probe();
      } finally {
        running--;
        addToNetwork(byClient, key, -1);
      }
    },
    running: () => running,
  };
}
