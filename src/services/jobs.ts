import { randomUUID } from 'node:crypto';
import type { Db } from '../db/index.js';
import { jobRunStore } from '../store/job-runs.js';

// Periodic background work shared by N instances on one database: every instance keeps a timer,
// and at each tick claims the current period (advisory lock + job_runs row, see store/job-runs).
// Exactly one instance runs a job per period; the others skip until the next period. A job never
// overlaps itself: a tick is skipped while this process still runs the job, and a period is not
// claimed while another instance's run of it is unfinished and its lease (JOB_LEASE_MS, renewed
// while it runs) has not expired. A run longer than its period makes the periods that start
// during it skip; the next period after it runs (docs/deployment.md "What the database coordinates").

/** This process's name in job_runs.instance (random, identifies no host or person). */
export const INSTANCE_ID = randomUUID();

/** Advisory lock keys of the periodic jobs (distinct from migrations 72_620_001, keyring 72_620_002). */
export const JOB_LOCKS = {
  'trust-score-refresh': 72_620_101,
  'telemetry-partitions': 72_620_102,
  'registry-sync': 72_620_103,
  'drift-storage': 72_620_104,
  'a2a-task-retention': 72_620_105,
  'receipt-retention': 72_620_106,
  'demand-retention': 72_620_107,
} as const;
export type JobName = keyof typeof JOB_LOCKS;

/** A run's lease (database time): renewed every third of it while the run lasts; an instance that dies mid-run holds the job at most this long. */
export const JOB_LEASE_MS = 60_000;

export interface PeriodicJob {
  /** Runs the job for the period containing `at` when no instance has yet; true when this one ran it. */
  tick(at: Date): Promise<boolean>;
  stop(): void;
}

/**
 * A job that runs at most once per `periodMs` across every instance sharing the database. The
 * timer fires every period; `tick` is also callable directly (tests, fixed clocks).
 */
export function periodicJob(
  db: Db,
  name: JobName,
  periodMs: number,
  now: () => Date,
  run: (at: Date) => Promise<unknown>,
  opts: { instance?: string; onError?: (err: unknown) => void; leaseMs?: number } = {},
): PeriodicJob {
  const store = jobRunStore(db);
  const instance = opts.instance ?? INSTANCE_ID;
  const leaseMs = opts.leaseMs ?? JOB_LEASE_MS;
  // This process is claiming or running the job: a tick meanwhile is skipped.
  let busy = false;
  async function tick(at: Date): Promise<boolean> {
    if (busy) return false;
    busy = true;
    try {
      const periodStart = new Date(Math.floor(at.getTime() / periodMs) * periodMs);
      if (!(await store.claim(name, JOB_LOCKS[name], periodStart, instance, leaseMs))) return false;
      // A failed renewal (database away) only lets the lease run out; the run goes on.
      const renewal = setInterval(() => {
        store.renew(name, periodStart, instance, leaseMs).catch(() => {});
      }, Math.max(1, Math.floor(leaseMs / 3)));
      renewal.unref();
      try {
        await run(at);
      } finally {
        clearInterval(renewal);
        await store.finish(name, periodStart, instance).catch(() => {});
      }
      return true;
    } finally {
      busy = false;
    }
  }
  const timer = setInterval(() => {
    tick(now()).catch((err) => opts.onError?.(err));
  }, periodMs);
  timer.unref();
  return { tick, stop: () => clearInterval(timer) };
}

const DAY_MS = 86_400_000;

/** A retention: a periodic job deleting what is older than a number of days, and the same deletion on demand. */
export interface RetentionJob {
  /** Deletes what is more than the retention's days older than `at`; how much (0 when the retention is off). */
  purge(at: Date): Promise<number>;
  /** The periodic job (tick it directly with a fixed clock in tests). */
  job: PeriodicJob;
  /** Stops the job's timer. */
  close(): void;
}

/**
 * Calls `deleteBatch` (which deletes at most `batch` and answers how many) until a call deletes
 * fewer: a retention deletes in statements of bounded size, never one long transaction. How many in all.
 */
export async function inBatches(batch: number, deleteBatch: (batch: number) => Promise<number>): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await deleteBatch(batch);
    total += n;
    if (n < batch) return total;
  }
}

/**
 * A retention of `days` (0 keeps everything) run every `periodMs`, once per period across
 * instances: `deleteBefore(cutoff)` deletes what is older than the cutoff and answers how much.
 */
export function retentionJob(
  db: Db,
  name: JobName,
  periodMs: number,
  days: number,
  now: () => Date,
  deleteBefore: (cutoff: Date) => Promise<number>,
  opts: { onError?: (err: unknown) => void } = {},
): RetentionJob {
  const purge = (at: Date): Promise<number> => (days === 0 ? Promise.resolve(0) : deleteBefore(new Date(at.getTime() - days * DAY_MS)));
  const job = periodicJob(db, name, periodMs, now, purge, { onError: opts.onError });
  return { purge, job, close: () => job.stop() };
}
