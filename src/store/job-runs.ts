import type { Db } from '../db/index.js';

/** Claims of periodic background jobs (one row per job and period; table job_runs). */
export function jobRunStore(db: Db) {
  return {
    /**
     * Claims the period for this instance. Inside one transaction: pg_try_advisory_xact_lock on the
     * job's key (a concurrent claimer does not wait, it skips); no claim while a run of the job is
     * unfinished with its lease (database time) not expired; then the (job, period) row, which
     * exists at most once, leased for `leaseMs`. True when this caller won and should run the job
     * (then renew() while it runs and finish() when it ends). Claims older than a week are deleted
     * on the way.
     */
    async claim(job: string, lockKey: number, periodStart: Date, instance: string, leaseMs: number): Promise<boolean> {
      return db.transaction(async (tx) => {
        const [lock] = await tx.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS ok', [lockKey]);
        if (!lock?.ok) return false;
        const [running] = await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM job_runs WHERE job = $1 AND finished_at IS NULL AND lease_until > now()', [job]);
        if (running!.n > 0) return false;
        const won = await tx.query(
          `INSERT INTO job_runs (job, period_start, instance, lease_until) VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
           ON CONFLICT (job, period_start) DO NOTHING RETURNING job`,
          [job, periodStart, instance, leaseMs],
        );
        if (won.length === 1) await tx.query("DELETE FROM job_runs WHERE job = $1 AND period_start < $2::timestamptz - interval '7 days'", [job, periodStart]);
        return won.length === 1;
      });
    },
    /** Extends the lease of a claimed run that is still running. */
    async renew(job: string, periodStart: Date, instance: string, leaseMs: number): Promise<void> {
      await db.query(
        `UPDATE job_runs SET lease_until = now() + $4 * interval '1 millisecond' WHERE job = $1 AND period_start = $2 AND instance = $3 AND finished_at IS NULL`,
        [job, periodStart, instance, leaseMs],
      );
    },
    /** The run ended (whatever its outcome): the next period may be claimed. */
    async finish(job: string, periodStart: Date, instance: string): Promise<void> {
      await db.query('UPDATE job_runs SET finished_at = now() WHERE job = $1 AND period_start = $2 AND instance = $3', [job, periodStart, instance]);
    },
    async runs(job: string): Promise<{ period_start: Date; instance: string }[]> {
      return db.query('SELECT period_start, instance FROM job_runs WHERE job = $1 ORDER BY period_start', [job]);
    },
  };
}
