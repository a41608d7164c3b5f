// RECEIPT_RETENTION_DAYS: deletes stored receipts issued longer ago than the retention. Every
// pre-flight, gate decision, agent query and drift check stores a receipt whenever its claim
// differs from the last second's (DECISIONS.md "Receipts and signatures"), so a busy gateway alone
// stores one per upstream per second; without a bound the table only grows. A deleted receipt's id
// answers 404 at /v1/receipt/{id}; its JWS still verifies offline (keys stay in the JWKS). Runs
// every RECEIPT_RETENTION_PERIOD_MS, once per period across instances (periodicJob), deleting in
// batches so no statement holds many rows' locks or a long transaction.
import { receiptStore } from '../store/receipts.js';
import type { ServiceDeps } from './context.js';
import { periodicJob } from './jobs.js';

export const RECEIPT_RETENTION_PERIOD_MS = 6 * 3600_000;
/** Receipts deleted per statement. */
export const RECEIPT_RETENTION_BATCH = 5000;
const DAY_MS = 86_400_000;

export function createReceiptRetention({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { onError?: (err: unknown) => void; batch?: number } = {}) {
  const store = receiptStore(db);
  const batch = opts.batch ?? RECEIPT_RETENTION_BATCH;
  /** Deletes the receipts issued more than RECEIPT_RETENTION_DAYS before `at`; how many (0 when retention is off). */
  async function purge(at: Date): Promise<number> {
    if (config.receiptRetentionDays === 0) return 0;
    const cutoff = new Date(at.getTime() - config.receiptRetentionDays * DAY_MS);
    let total = 0;
    for (;;) {
      const n = await store.deleteIssuedBefore(cutoff, batch);
      total += n;
      if (n < batch) return total;
    }
  }
  const job = periodicJob(db, 'receipt-retention', RECEIPT_RETENTION_PERIOD_MS, now, purge, { onError: opts.onError });
  return {
    purge,
    /** The periodic job (tick it directly with a fixed clock in tests). */
    job,
    close(): void {
      job.stop();
    },
  };
}
