import type { Queryable } from '../db/index.js';
import type { Statement } from './one-statement.js';
import { perTurn } from './per-turn.js';

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

// A flood of look-ups of receipt ids that do not exist (no cache can hold them) costs the
// database one statement per event-loop turn, not one per request (src/store/per-turn.ts).
const receiptsById = perTurn(async (db: Queryable, ids: string[]) => {
  const rows = await db.query<ReceiptRow>('SELECT receipt_id, kind, sub, issued_at, kid, claim, jws FROM receipts WHERE receipt_id = ANY($1::text[])', [ids], { prepare: 'receipts_by_id' });
  return new Map(rows.map((r) => [r.receipt_id, r]));
});

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
    /** The receipt with this id, or null; the ids asked in one event-loop turn are read in one statement. */
    async get(receiptId: string): Promise<ReceiptRow | null> {
      return (await receiptsById(db, receiptId)) ?? null;
    },
    /**
     * Deletes up to `batch` receipts issued before `cutoff`, oldest kinds' rows by the (kind,
     * issued_at) index (a loose scan finds the kinds: no index on issued_at alone is kept for
     * this); the number deleted (fewer than `batch`: none is left).
     */
    async deleteIssuedBefore(cutoff: Date, batch: number): Promise<number> {
      const rows = await db.query<{ n: string }>(
        `WITH RECURSIVE kinds AS (
           SELECT min(kind) AS kind FROM receipts
           UNION ALL
           SELECT (SELECT min(r.kind) FROM receipts r WHERE r.kind > kinds.kind) FROM kinds WHERE kinds.kind IS NOT NULL
         ), doomed AS (
           SELECT x.receipt_id FROM kinds k
             CROSS JOIN LATERAL (SELECT r.receipt_id FROM receipts r WHERE r.kind = k.kind AND r.issued_at < $1 ORDER BY r.issued_at LIMIT $2) x
            WHERE k.kind IS NOT NULL
            LIMIT $2
         ), gone AS (
           DELETE FROM receipts WHERE receipt_id = ANY (ARRAY(SELECT receipt_id FROM doomed)) RETURNING 1
         )
         SELECT count(*)::int8 AS n FROM gone`,
        [cutoff, batch],
      );
      return Number(rows[0]?.n ?? 0);
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
