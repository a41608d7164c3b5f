// A2A_TASK_RETENTION_DAYS: deletes A2A tasks whose status has not changed for that long. Every
// message/send stores a task (so that tasks/get, ListTasks and SubscribeToTask answer from any
// instance), from any caller; without a bound the table only grows. Runs every
// A2A_RETENTION_PERIOD_MS, once per period across instances (periodicJob).
import { a2aTaskStore } from '../store/a2a-tasks.js';
import type { ServiceDeps } from './context.js';
import { periodicJob } from './jobs.js';

export const A2A_RETENTION_PERIOD_MS = 6 * 3600_000;
const DAY_MS = 86_400_000;

export function createA2aTaskRetention({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { onError?: (err: unknown) => void } = {}) {
  const store = a2aTaskStore(db);
  /** Deletes the tasks idle for A2A_TASK_RETENTION_DAYS as of `at`; 0 when retention is off. */
  const purge = (at: Date): Promise<number> =>
    config.a2aTaskRetentionDays === 0 ? Promise.resolve(0) : store.deleteIdleBefore(new Date(at.getTime() - config.a2aTaskRetentionDays * DAY_MS));
  const job = periodicJob(db, 'a2a-task-retention', A2A_RETENTION_PERIOD_MS, now, purge, { onError: opts.onError });
  return {
    purge,
    /** The periodic job (tick it directly with a fixed clock in tests). */
    job,
    close(): void {
      job.stop();
    },
  };
}
