// DEMAND_RETENTION_DAYS: pre-flight demand (every pre-flight, gate decision and agent query)
// grows by one row per claim per second (a gateway: one per upstream per second) and by one
// per-target sum per distinct target text, any name a client sends. Every
// DEMAND_RETENTION_PERIOD_MS, once per period across instances (retentionJob), this job deletes
// the demand rows checked longer ago than the retention and the hourly sums of the hours that
// ended before it (which the windows read), and retires the per-target sums of targets that named
// no tracked server and were not checked within it: their counts move into one retired row
// (migration 1630), so the all-time figures (/api/demand alltime, the coverage report,
// /api/stats) keep counting every check. The windows (24h, 7d, 30d) are shorter than the
// shortest retention allowed.
import { demandStore, notifyDemandRecorded } from '../store/demand.js';
import type { ServiceDeps } from './context.js';
import { inBatches, retentionJob, type RetentionJob } from './jobs.js';

export const DEMAND_RETENTION_PERIOD_MS = 6 * 3600_000;
/** Demand rows deleted, or targets retired, per statement. */
export const DEMAND_RETENTION_BATCH = 5000;

export function createDemandRetention({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { onError?: (err: unknown) => void; batch?: number } = {}): RetentionJob {
  const store = demandStore(db);
  const batch = opts.batch ?? DEMAND_RETENTION_BATCH;
  /** Retires the untracked targets last checked before `cutoff`, then deletes the rows and hourly sums before it; how many of all. */
  async function deleteBefore(cutoff: Date): Promise<number> {
    let total = 0;
    let after: string | null = null;
    for (;;) {
      const r = await store.retireTargets(cutoff, after, batch);
      total += r.retired;
      if (r.picked < batch || r.last === null) break;
      after = r.last;
    }
    total += await inBatches(batch, (n) => store.deleteRowsBefore(cutoff, n));
    total += await inBatches(batch, (n) => store.deleteHourlyBefore(cutoff, n));
    // Cached demand figures (the coverage report's lists) drop the retired targets.
    if (total > 0) notifyDemandRecorded(db);
    return total;
  }
  return retentionJob(db, 'demand-retention', DEMAND_RETENTION_PERIOD_MS, config.demandRetentionDays, now, deleteBefore, opts);
}
