import type { Queryable } from '../db/index.js';

export interface PaymentRow {
  tx_hash: string;
  payer: string | null;
  amount_units: number;
  block_number: number | null;
  server_url: string;
  receipt_id: string | null;
  paid_at: Date;
}

/** On-chain payments honoured for paid verdicts; the primary key makes each hash usable once. */
export function paymentStore(db: Queryable) {
  return {
    async exists(txHash: string): Promise<boolean> {
      const rows = await db.query('SELECT 1 FROM payments WHERE tx_hash = $1', [txHash]);
      return rows.length > 0;
    },
    /** Claims the hash; false when another request (on any instance) claimed it first. */
    async claim(p: { txHash: string; payer: string | null; units: bigint; blockNumber: bigint | null; serverUrl: string; at: Date }): Promise<boolean> {
      const rows = await db.query(
        `INSERT INTO payments (tx_hash, payer, amount_units, block_number, server_url, paid_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tx_hash) DO NOTHING RETURNING tx_hash`,
        [p.txHash, p.payer, p.units.toString(), p.blockNumber === null ? null : p.blockNumber.toString(), p.serverUrl, p.at],
      );
      return rows.length > 0;
    },
    async attachReceipt(txHash: string, receiptId: string): Promise<void> {
      await db.query('UPDATE payments SET receipt_id = $2 WHERE tx_hash = $1', [txHash, receiptId]);
    },
  };
}
