import { isConnectionError, type Db } from '../db/index.js';
import { groupCommit, type GroupCommit } from './group-commit.js';
import { insertReceiptsStatement, type ReceiptRow } from './receipts.js';

/**
 * Group commit for pre-flight receipts: concurrent checks share one multi-row INSERT (one round
 * trip per batch). `submit` resolves after that statement committed, so a receipt is resolvable
 * at /v1/receipt/{id} by the time its check is answered. (Demand is counted apart, in
 * src/store/demand.ts's buffer.) Bounded like every group commit (src/store/group-commit.ts): at
 * most 8 batches' worth wait, none longer than 5 s for its write to begin; beyond, the check is
 * answered 503 with Retry-After instead of waiting.
 */
export function receiptBatcher(db: Db, opts: { onBatch?: (size: number) => void } = {}): GroupCommit<ReceiptRow> {
  return groupCommit<ReceiptRow>({
    write: async (items) => {
      await db.query(...insertReceiptsStatement(items));
    },
    maxItems: 500,
    // Inserts only (no shared rows to lock), so PostgreSQL can take a few at once.
    concurrency: db.kind === 'postgres' ? 3 : 1,
    onBatch: opts.onBatch,
    isolateOnError: (err) => !isConnectionError(err),
    what: 'receipt',
  });
}
