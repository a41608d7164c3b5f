import type { Queryable } from '../db/index.js';
import type { Statement } from './one-statement.js';

export interface ReceiptRow {
  receipt_id: string;
  kind: string;
  sub: string;
  issued_at: Date;
  kid: string;
  claim: Record<string, unknown>;
  jws: string;
}

/** The multi-row INSERT of receipts (also part of the pre-flight group commit's one statement). */
export function insertReceiptsStatement(rows: readonly ReceiptRow[]): Statement {
  return [
    `INSERT INTO receipts (receipt_id, kind, sub, issued_at, kid, claim, jws)
     SELECT u.id, u.k, u.s, u.t, u.kid, u.c::jsonb, u.j
       FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[]) AS u(id, k, s, t, kid, c, j)`,
    [
      rows.map((r) => r.receipt_id),
      rows.map((r) => r.kind),
      rows.map((r) => r.sub),
      rows.map((r) => r.issued_at.toISOString()),
      rows.map((r) => r.kid),
      rows.map((r) => JSON.stringify(r.claim)),
      rows.map((r) => r.jws),
    ],
    { prepare: 'receipts_append' },
  ];
}

export function receiptStore(db: Queryable) {
  return {
    async insert(r: ReceiptRow): Promise<void> {
      await db.query('INSERT INTO receipts (receipt_id, kind, sub, issued_at, kid, claim, jws) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
        r.receipt_id,
        r.kind,
        r.sub,
        r.issued_at,
        r.kid,
        JSON.stringify(r.claim),
        r.jws,
      ]);
    },
    /** Several receipts in one statement. */
    async insertMany(rows: readonly ReceiptRow[]): Promise<void> {
      if (rows.length === 0) return;
      await db.query(...insertReceiptsStatement(rows));
    },
    async get(receiptId: string): Promise<ReceiptRow | null> {
      const rows = await db.query<ReceiptRow>('SELECT receipt_id, kind, sub, issued_at, kid, claim, jws FROM receipts WHERE receipt_id = $1', [receiptId]);
      return rows[0] ?? null;
    },
    /** The newest receipts about one subject (server canonical URL or skill id), newest first. */
    async bySubject(sub: string, limit: number): Promise<ReceiptRow[]> {
      return db.query<ReceiptRow>(
        'SELECT receipt_id, kind, sub, issued_at, kid, claim, jws FROM receipts WHERE sub = $1 ORDER BY issued_at DESC, receipt_id LIMIT $2',
        [sub, limit],
      );
    },
  };
}

export type ReceiptStore = ReturnType<typeof receiptStore>;
