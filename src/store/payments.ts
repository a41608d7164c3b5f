import type { Queryable } from '../db/index.js';

export interface PaymentRow {
  tx_hash: string;
  payer: string | null;
  amount_units: number;
  block_number: number | null;
  server_url: string;
  receipt_id: string | null;
  paid_at: Date;
  method: 'tx_hash' | 'facilitator';
}

/**
 * Payments honoured for paid verdicts. `payments` holds every transaction hash that has paid (its
 * primary key makes each usable once); `payment_authorizations` every signed (EIP-3009) payment,
 * keyed by its identity, claimed before it is settled.
 */
export function paymentStore(db: Queryable) {
  return {
    /** Claims the hash; false when another request (on any instance) claimed it first. */
    async claim(p: { txHash: string; payer: string | null; units: bigint; blockNumber: bigint | null; serverUrl: string; at: Date; method?: PaymentRow['method'] }): Promise<boolean> {
      const rows = await db.query(
        `INSERT INTO payments (tx_hash, payer, amount_units, block_number, server_url, paid_at, method) VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tx_hash) DO NOTHING RETURNING tx_hash`,
        [p.txHash.toLowerCase(), p.payer, p.units.toString(), p.blockNumber === null ? null : p.blockNumber.toString(), p.serverUrl, p.at, p.method ?? 'tx_hash'],
      );
      return rows.length > 0;
    },
    /** Gives a claimed hash back when no verdict could be produced for it. */
    async release(txHash: string): Promise<void> {
      await db.query('DELETE FROM payments WHERE tx_hash = $1 AND receipt_id IS NULL', [txHash.toLowerCase()]);
    },
    async attachReceipt(txHash: string, receiptId: string): Promise<void> {
      await db.query('UPDATE payments SET receipt_id = $2 WHERE tx_hash = $1', [txHash.toLowerCase(), receiptId]);
    },

    async authorizationExists(id: string): Promise<boolean> {
      const rows = await db.query('SELECT 1 FROM payment_authorizations WHERE authorization_id = $1', [id]);
      return rows.length > 0;
    },
    /** Claims a signed payment before settlement; false when it was claimed before (on any instance). */
    async claimAuthorization(p: { id: string; x402Version: number; payer: string; units: bigint; serverUrl: string; at: Date }): Promise<boolean> {
      const rows = await db.query(
        `INSERT INTO payment_authorizations (authorization_id, x402_version, payer, amount_units, server_url, claimed_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (authorization_id) DO NOTHING RETURNING authorization_id`,
        [p.id, p.x402Version, p.payer, p.units.toString(), p.serverUrl, p.at],
      );
      return rows.length > 0;
    },
    /** Gives a claim back after its settlement definitely failed (nothing moved on chain). */
    async releaseAuthorization(id: string): Promise<void> {
      await db.query('DELETE FROM payment_authorizations WHERE authorization_id = $1 AND settled_at IS NULL', [id]);
    },
    async authorizationSettled(id: string, p: { transaction: string; receiptId: string | null; at: Date }): Promise<void> {
      await db.query('UPDATE payment_authorizations SET settle_transaction = $2, receipt_id = $3, settled_at = $4 WHERE authorization_id = $1', [id, p.transaction.toLowerCase(), p.receiptId, p.at]);
    },
  };
}
