import type { Db } from '../db/index.js';

/** Claims of periodic background jobs (one row per job and period; table job_runs). */
export function jobRunStore(db: Db) {
  return {
    /**
     * Claims the period for this instance. Inside one transaction: pg_try_advisory_xact_lock on the
     * job's key (a concurrent claimer does not wait, it skips), then the (job, period) row, which
     * exists at most once. True when this caller won and should run the job. Claims older than
     * a week are deleted on the way.
     */
    async claim(job: string, lockKey: number, periodStart: Date, instance: string): Promise<boolean> {
      return db.transaction(async (tx) => {
        const [lock] = await tx.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS ok', [lockKey]);
        if (!lock?.ok) return false;
        const won = await tx.query(
          'INSERT INTO job_runs (job, period_start, instance) VALUES ($1, $2, $3) ON CONFLICT (job, period_start) DO NOTHING RETURNING job',
          [job, periodStart, instance],
        );
        if (won.length === 1) await tx.query("DELETE FROM job_runs WHERE job = $1 AND period_start < $2::timestamptz - interval '7 days'", [job, periodStart]);
        return won.length === 1;
      });
    },
    async runs(job: string): Promise<{ period_start: Date; instance: string }[]> {
      return db.query('SELECT period_start, instance FROM job_runs WHERE job = $1 ORDER BY period_start', [job]);
    },
  };
}
