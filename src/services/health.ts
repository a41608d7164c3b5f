import type { Db } from '../db/index.js';
import { addToNetwork, networkShare } from '../domain/client-network.js';
import { rateLimitKey } from './rate-limits.js';

/**
 * Whether this process can serve, for grpc.health.v1 (src/http/grpc-health.ts): it serves while
 * the database answers and the process is not draining. One monitor per process: concurrent
 * checks share one database round trip (and reuse a result younger than CHECK_REUSE_MS), and
 * Watch subscribers share one poller that runs only while someone watches.
 */
export type Serving = 'SERVING' | 'NOT_SERVING';

/**
 * Bounds on the open Watch streams (docs/reliability.md "gRPC health Watch streams"). A stream
 * sends only when the status changes, so no idle deadline ever ends it: before these bounds one
 * client over h2c held 4,000 of them (about 42 KB of heap each), open for ever. As A2A
 * subscriptions: at most `maxWatches` per instance, an eighth of them (at least 2) per client
 * network, and each ends cleanly (status OK) after `maxMs`; gRPC health clients watch again.
 */
export const HEALTH_WATCH_LIMITS = {
  maxWatches: 200,
  maxMs: 5 * 60_000,
} as const;

/** The per-client-network share of the open Watch streams. */
export function watchesPerClient(total: number): number {
  return networkShare(total);
}

export interface WatchLimits {
  maxWatches: number;
  maxWatchesPerClient: number;
  /** A stream ends (the iteration returns) after this long. */
  maxMs: number;
}

/** A Watch refused because the instance or the client's network holds its share of streams. */
export class WatchRefused extends Error {}

export interface HealthMonitor {
  /** The status now (a bounded database check). */
  check(): Promise<Serving>;
  /**
   * The status now, then each change, until `signal` aborts, the process drains (a draining
   * process yields NOT_SERVING and then ends the iteration, so that no stream holds shutdown) or
   * `maxMs` passes. Its first `next()` throws WatchRefused when the instance holds `maxWatches`
   * streams, or the network of `client` (a client address) its share of them.
   */
  watch(signal: AbortSignal, opts?: { client?: string }): AsyncGenerator<Serving>;
  /** Open Watch streams (tests, metrics). */
  watching(): number;
  /** From now on the process is draining: NOT_SERVING, and every watch ends. */
  drain(): void;
  readonly draining: boolean;
}

export interface HealthOptions {
  db: Db;
  /** How often the poller re-checks while someone watches. */
  intervalMs: number;
  /** Longest a database check may take before it counts as NOT_SERVING. */
  checkTimeoutMs?: number;
  /** Bounds on the Watch streams; HEALTH_WATCH_LIMITS by default. */
  watchLimits?: Partial<WatchLimits>;
}

const CHECK_REUSE_MS = 250;

export function createHealthMonitor({ db, intervalMs, checkTimeoutMs = 3_000, watchLimits = {} }: HealthOptions): HealthMonitor {
  const maxWatches = watchLimits.maxWatches ?? HEALTH_WATCH_LIMITS.maxWatches;
  const perClient = watchLimits.maxWatchesPerClient ?? watchesPerClient(maxWatches);
  const maxMs = watchLimits.maxMs ?? HEALTH_WATCH_LIMITS.maxMs;
  let open = 0;
  /** Open streams per client network (rateLimitKey), dropped at zero. */
  const openByClient = new Map<string, number>();
  let draining = false;
  let inflight: Promise<Serving> | null = null;
  let last: { at: number; status: Serving } | null = null;
  const subscribers = new Set<(s: Serving | 'drained') => void>();
  let poller: NodeJS.Timeout | null = null;
  let current: Serving | null = null;

  async function databaseAnswers(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), checkTimeoutMs);
      timer.unref();
    });
    const probe = (async () => {
      try {
        // The embedded database's probe is bounded and notices a wedged PGlite, as /healthz does.
        return db.liveness ? (await db.liveness()).live : await db.ping();
      } catch {
        return false;
      }
    })();
    try {
      return await Promise.race([probe, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  function check(): Promise<Serving> {
    if (draining) return Promise.resolve('NOT_SERVING');
    if (last && Date.now() - last.at < CHECK_REUSE_MS) return Promise.resolve(last.status);
    inflight ??= databaseAnswers()
      .then((ok): Serving => (ok && !draining ? 'SERVING' : 'NOT_SERVING'))
      .then((status) => {
        last = { at: Date.now(), status };
        return status;
      })
      .finally(() => {
        inflight = null;
      });
    return inflight;
  }

  function publish(s: Serving | 'drained') {
    for (const fn of subscribers) fn(s);
  }

  async function tick() {
    const s = await check();
    if (draining) return;
    if (s !== current) {
      current = s;
      publish(s);
    }
  }

  function startPoller() {
    if (poller) return;
    poller = setInterval(() => void tick(), intervalMs);
    poller.unref();
  }

  function stopPollerIfIdle() {
    if (subscribers.size > 0 || !poller) return;
    clearInterval(poller);
    poller = null;
    current = null;
  }

  return {
    get draining() {
      return draining;
    },
    check,
    watching: () => open,
    drain() {
      if (draining) return;
      draining = true;
      publish('drained');
      if (poller) clearInterval(poller);
      poller = null;
    },
    async *watch(signal: AbortSignal, opts: { client?: string } = {}) {
      // Admitted and counted as the stream starts (its first next()), before anything awaits.
      const client = rateLimitKey(opts.client);
      if ((openByClient.get(client) ?? 0) >= perClient) {
        throw new WatchRefused(`this client network holds ${perClient} open health Watch streams already (its share of this instance's); use Check, or watch again once one has ended`);
      }
      if (open >= maxWatches) throw new WatchRefused(`this instance holds ${maxWatches} open health Watch streams already; use Check, or watch again later`);
      open++;
      addToNetwork(openByClient, client, 1);
      // Changes arrive through a small queue so that none is lost while the consumer writes.
      const queue: (Serving | 'drained')[] = [];
      let wake: (() => void) | null = null;
      const push = (s: Serving | 'drained') => {
        queue.push(s);
        wake?.();
      };
      const onAbort = () => wake?.();
      // Each stream ends after maxMs, whatever it sent: it holds memory and a slot until then.
      let expired = false;
      const timer = setTimeout(() => {
        expired = true;
        wake?.();
      }, maxMs);
      timer.unref();
      subscribers.add(push);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        let sent: Serving = await check();
        if (current === null) current = sent;
        yield sent;
        if (draining) return;
        startPoller();
        while (!signal.aborted && !expired) {
          if (queue.length === 0) {
            await new Promise<void>((resolve) => {
              wake = resolve;
            });
            wake = null;
            continue;
          }
          const next = queue.shift()!;
          if (next === 'drained') {
            if (sent !== 'NOT_SERVING') yield 'NOT_SERVING';
            return;
          }
          if (next !== sent) {
            sent = next;
            yield next;
          }
        }
      } finally {
        clearTimeout(timer);
        open--;
        addToNetwork(openByClient, client, -1);
        subscribers.delete(push);
        signal.removeEventListener('abort', onAbort);
        stopPollerIfIdle();
      }
    },
  };
}
