// RECEIPT_RETENTION_DAYS: deletes stored receipts issued longer ago than the retention. Every
// pre-flight, gate decision, agent query and drift check stores a receipt whenever its claim
// differs from the last second's (DECISIONS.md "Receipts and signatures"), so a busy gateway alone
// stores one per upstream per second; without a bound the table only grows. A deleted receipt's id
// answers 404 at /v1/receipt/{id}; its JWS still verifies offline (keys stay in the JWKS). Runs
// every RECEIPT_RETENTION_PERIOD_MS, once per period across instances (retentionJob), deleting in
// batches so no statement holds many rows' locks or a long transaction.
import { receiptStore } from '../store/receipts.js';
import type { ServiceDeps } from './context.js';
import { inBatches, retentionJob, type RetentionJob } from './jobs.js';

export const RECEIPT_RETENTION_PERIOD_MS = 6 * 3600_000;
/** Receipts deleted per statement. */
export const RECEIPT_RETENTION_BATCH = 5000;

export function createReceiptRetention({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { onError?: (err: unknown) => void; batch?: number } = {}): RetentionJob {
  const store = receiptStore(db);
  const batch = opts.batch ?? RECEIPT_RETENTION_BATCH;
  // The receipts issued before the cutoff, a batch per statement.
  const deleteBefore = (cutoff: Date) => inBatches(batch, (n) => store.deleteIssuedBefore(cutoff, n));
  return retentionJob(db, 'receipt-retention', RECEIPT_RETENTION_PERIOD_MS, config.receiptRetentionDays, now, deleteBefore, opts);
}
