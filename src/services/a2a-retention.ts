// A2A_TASK_RETENTION_DAYS: deletes A2A tasks whose status has not changed for that long. Every
// message/send stores a task (so that tasks/get, ListTasks and SubscribeToTask answer from any
// instance), from any caller; without a bound the table only grows. Runs every
// A2A_RETENTION_PERIOD_MS, once per period across instances (retentionJob).
import { a2aTaskStore } from '../store/a2a-tasks.js';
import type { ServiceDeps } from './context.js';
import { retentionJob, type RetentionJob } from './jobs.js';

export const A2A_RETENTION_PERIOD_MS = 6 * 3600_000;

export function createA2aTaskRetention({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { onError?: (err: unknown) => void } = {}): RetentionJob {
  const store = a2aTaskStore(db);
  return retentionJob(db, 'a2a-task-retention', A2A_RETENTION_PERIOD_MS, config.a2aTaskRetentionDays, now, (cutoff) => store.deleteIdleBefore(cutoff), opts);
}
