// Keeps the monthly telemetry partitions ready and enforces TELEMETRY_RETENTION_DAYS.
// Runs at start-up and then every RETENTION_JOB_PERIOD_MS, once per period across all instances
// (periodicJob: advisory lock + job_runs). Dropping raw telemetry never changes a score: scores
// read only the rollups (server_totals, telemetry_hourly, trust_evidence), which are kept.
import { planPartitions } from '../domain/telemetry-partitions.js';
import { telemetryPartitionStore } from '../store/telemetry-partitions.js';
import type { ServiceDeps } from './context.js';
import { periodicJob } from './jobs.js';

export const RETENTION_JOB_PERIOD_MS = 6 * 3600_000;

export interface RetentionRun {
  created: string[];
  dropped: string[];
  /** Rows deleted from the default partition for being older than the retention. */
  deletedDefaultRows: number;
}

export function createTelemetryRetention(
  { db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>,
  opts: { onError?: (err: unknown) => void; runAtStartup?: boolean } = {},
) {
  const partitions = telemetryPartitionStore(db);

  /** Creates missing partitions and drops expired ones as of `at`. */
  async function maintain(at: Date): Promise<RetentionRun> {
    const [existing, defaultMonths] = await Promise.all([partitions.list(), partitions.defaultMonths()]);
    const plan = planPartitions({ at, retentionDays: config.telemetryRetentionDays, existing, defaultMonths });
    const created: string[] = [];
    for (const p of plan.create) if (await partitions.create(p)) created.push(p.name);
    for (const p of plan.drop) await partitions.drop(p);
    const deletedDefaultRows = plan.cutoff ? await partitions.deleteDefaultBefore(plan.cutoff) : 0;
    return { created, dropped: plan.drop.map((p) => p.name), deletedDefaultRows };
  }

  const report = (err: unknown) => {
    try {
      opts.onError?.(err);
    } catch {
      // a failing logger must not turn a failed run into an unhandled rejection
    }
  };
  const job = periodicJob(db, 'telemetry-partitions', RETENTION_JOB_PERIOD_MS, now, maintain, { onError: report });
  // Once at start-up too (partitions may be missing after a long stop); close() waits for it.
  let startup: Promise<unknown> | null = opts.runAtStartup === false ? null : job.tick(now()).catch(report);

  return {
    maintain,
    /** The periodic job (tick it directly with a fixed clock in tests). */
    job,
    /** Resolves when the start-up run has finished (whatever its outcome). */
    async ready(): Promise<void> {
      await startup;
    },
    /** Lists the monthly partitions (oldest first). */
    list: () => partitions.list(),
    async close(): Promise<void> {
      job.stop();
      await startup;
      startup = null;
    },
  };
}

export type TelemetryRetention = ReturnType<typeof createTelemetryRetention>;
