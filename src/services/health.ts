import type { Db } from '../db/index.js';

/**
 * Whether this process can serve, for grpc.health.v1 (src/http/grpc-health.ts): it serves while
 * the database answers and the process is not draining. One monitor per process: concurrent
 * checks share one database round trip (and reuse a result younger than CHECK_REUSE_MS), and
 * Watch subscribers share one poller that runs only while someone watches.
 */
export type Serving = 'SERVING' | 'NOT_SERVING';

export interface HealthMonitor {
  /** The status now (a bounded database check). */
  check(): Promise<Serving>;
  /**
   * The status now, then each change, until `signal` aborts or the process drains (a draining
   * process yields NOT_SERVING and then ends the iteration, so that no stream holds shutdown).
   */
  watch(signal: AbortSignal): AsyncGenerator<Serving>;
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
}

const CHECK_REUSE_MS = 250;

export function createHealthMonitor({ db, intervalMs, checkTimeoutMs = 3_000 }: HealthOptions): HealthMonitor {
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
    drain() {
      if (draining) return;
      draining = true;
      publish('drained');
      if (poller) clearInterval(poller);
      poller = null;
    },
    async *watch(signal: AbortSignal) {
      // Changes arrive through a small queue so that none is lost while the consumer writes.
      const queue: (Serving | 'drained')[] = [];
      let wake: (() => void) | null = null;
      const push = (s: Serving | 'drained') => {
        queue.push(s);
        wake?.();
      };
      const onAbort = () => wake?.();
      subscribers.add(push);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        let sent: Serving = await check();
        if (current === null) current = sent;
        yield sent;
        if (draining) return;
        startPoller();
        while (!signal.aborted) {
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
        subscribers.delete(push);
        signal.removeEventListener('abort', onAbort);
        stopPollerIfIdle();
      }
    },
  };
}
