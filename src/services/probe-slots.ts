import { addToNetwork, networkShare } from '../domain/client-network.js';
import { ObservatoryError } from '../errors.js';
import { clientAddressKey, type CallContext } from './context.js';
import { rateLimitKey } from './rate-limits.js';

// Work that holds something scarce for long, bounded while it runs (docs/reliability.md "Rate
// limits"): the per-minute rate limits bound how many such calls a client starts, not how many run
// at once, and every client network starts its own. A slot pool bounds the calls running in this
// process and per client network (its share); beyond, the call is refused before any work: 429 for
// the client's share, 503 for the process, both with Retry-After.
//
// - Probes (PROBE_CONCURRENCY): a drift check, the agent-readiness probe, the agency checklist and
//   the attestation each hold outbound sockets for up to their deadline (20 s for a manifest) and
//   up to a few MiB of what the target sent; a target that answers slowly keeps each for its whole
//   deadline. Active observation has its own bound (OBSERVE_CONCURRENCY) and is not counted here.
// - Compliance exports (EXPORT_CONCURRENCY): each reads every raw telemetry row of a server over
//   its period (up to ten years), seconds of database work on a busy server, holding a pooled
//   connection; without a bound one client kept every connection busy and every report and trust
//   read waited behind its exports.
// - Requests to the ClawHub registry (REGISTRY_MAX_IN_FLIGHT, src/services/skill-trust.ts): each
//   holds a socket to the registry for up to 5 s.

/** Seconds a refused caller is told to wait: about the time a slow call keeps its slot. */
const RETRY_AFTER_SECONDS = '5';

export interface ProbeSlots {
  /** Runs `work` in a slot of the caller's client network, or throws 429/503 without running it. */
  run<T>(ctx: CallContext | undefined, work: () => Promise<T>): Promise<T>;
  /** Calls running now (tests, metrics). */
  running(): number;
}

/** The per-client-network share of PROBE_CONCURRENCY. */
export function probesPerClient(total: number): number {
  return networkShare(total);
}

/**
 * A pool of `total` slots, at most `perClient` per client network; `what` names the calls in
 * refusals ("probes"), `setting` the variable that sizes the pool.
 */
export function createSlotPool(o: { total: number; perClient: number; what: string; setting: string }): ProbeSlots {
  const { total, perClient, what, setting } = o;
  let running = 0;
  const byClient = new Map<string, number>();
  return {
    async run(ctx, work) {
      const key = rateLimitKey(ctx?.values.get(clientAddressKey));
      const mine = byClient.get(key) ?? 0;
      if (mine >= perClient) {
        throw new ObservatoryError('rate_limited', `this client network already runs its share of ${setting} (${what}: ${perClient} at once); retry once one has answered`, {
          headers: { 'retry-after': RETRY_AFTER_SECONDS },
        });
      }
      if (running >= total) {
        throw new ObservatoryError('unavailable', `${total} ${what} are running in this instance (${setting}); retry shortly`, { headers: { 'retry-after': RETRY_AFTER_SECONDS } });
      }
      running++;
      addToNetwork(byClient, key, 1);
      try {
        return await work();
      } finally {
        running--;
        addToNetwork(byClient, key, -1);
      }
    },
    running: () => running,
  };
}

export function createProbeSlots(total: number, perClient = probesPerClient(total)): ProbeSlots {
  return createSlotPool({ total, perClient, what: 'probes', setting: 'PROBE_CONCURRENCY' });
}

/** Compliance exports running at once: EXPORT_CONCURRENCY per instance, one per client network unless the pool is large. */
export function createExportSlots(total: number): ProbeSlots {
  return createSlotPool({ total, perClient: networkShare(total, 1), what: 'compliance exports', setting: 'EXPORT_CONCURRENCY' });
}
