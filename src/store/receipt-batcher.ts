import { isConnectionError, type Db } from '../db/index.js';
import { demandStore, type DemandRow } from './demand.js';
import { groupCommit, type GroupCommit } from './group-commit.js';
import { receiptStore, type ReceiptRow } from './receipts.js';

/** A signed receipt to store, with the demand row of the check that produced it (if any). */
export interface ReceiptWrite {
  receipt: ReceiptRow;
  demand: DemandRow | null;
}

/**
 * Group commit for pre-flight receipts and demand rows: concurrent checks share one transaction
 * (two multi-row INSERTs). `submit` resolves after that transaction committed, so a receipt is
 * resolvable at /v1/receipt/{id} by the time its check is answered.
 */
export function receiptBatcher(db: Db, opts: { onBatch?: (size: number) => void } = {}): GroupCommit<ReceiptWrite> {
  return groupCommit<ReceiptWrite>({
    write: (items) =>
      db.transaction(async (tx) => {
        await receiptStore(tx).insertMany(items.map((i) => i.receipt));
        await demandStore(tx).insertMany(items.flatMap((i) => (i.demand ? [i.demand] : [])));
      }),
    maxItems: 500,
    // Inserts only (no shared rows to lock), so PostgreSQL can take a few at once.
    concurrency: db.kind === 'postgres' ? 3 : 1,
    onBatch: opts.onBatch,
    isolateOnError: (err) => !isConnectionError(err),
  });
}
