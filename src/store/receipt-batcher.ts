import { isConnectionError, type Db } from '../db/index.js';
import { insertDemandStatement, notifyDemandRecorded, type DemandRow } from './demand.js';
import { groupCommit, type GroupCommit } from './group-commit.js';
import { oneStatement, type Statement } from './one-statement.js';
import { insertReceiptsStatement, type ReceiptRow } from './receipts.js';

/** A signed receipt to store, with the demand row of the check that produced it (if any). */
export interface ReceiptWrite {
  receipt: ReceiptRow;
  demand: DemandRow | null;
}

/**
 * Group commit for pre-flight receipts and demand rows: concurrent checks share one statement
 * (two multi-row INSERTs as writable CTEs, atomic on its own: one round trip per batch).
 * `submit` resolves after that statement committed, so a receipt is resolvable at
 * /v1/receipt/{id} by the time its check is answered.
 */
export function receiptBatcher(db: Db, opts: { onBatch?: (size: number) => void } = {}): GroupCommit<ReceiptWrite> {
  return groupCommit<ReceiptWrite>({
    write: async (items) => {
      const demand = items.flatMap((i) => (i.demand ? [i.demand] : []));
      const stmts: Statement[] = [insertReceiptsStatement(items.map((i) => i.receipt))];
      if (demand.length > 0) stmts.push(insertDemandStatement(demand));
      await db.query(...oneStatement(stmts));
      if (demand.length > 0) notifyDemandRecorded(db);
    },
    maxItems: 500,
    // Inserts only (no shared rows to lock), so PostgreSQL can take a few at once.
    concurrency: db.kind === 'postgres' ? 3 : 1,
    onBatch: opts.onBatch,
    isolateOnError: (err) => !isConnectionError(err),
  });
}
