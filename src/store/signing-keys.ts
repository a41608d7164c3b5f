import type { Queryable } from '../db/index.js';

export interface StoredKey {
  kid: string;
  public_jwk: Record<string, string>;
  private_jwk: Record<string, string> | null;
  created_at: Date;
  retired_at: Date | null;
  active: boolean;
}

const COLS = 'kid, public_jwk, private_jwk, created_at, retired_at, active';

export function signingKeyStore(db: Queryable) {
  return {
    async all(): Promise<StoredKey[]> {
      return db.query<StoredKey>(`SELECT ${COLS} FROM signing_keys ORDER BY created_at, kid`);
    },
    async active(): Promise<StoredKey | null> {
      return (await db.query<StoredKey>(`SELECT ${COLS} FROM signing_keys WHERE active`))[0] ?? null;
    },
    /** Makes `key` the only active key; the previous one stays published (retired). */
    async activate(key: { kid: string; public_jwk: object; private_jwk: object | null }, now: Date): Promise<void> {
      await db.query('UPDATE signing_keys SET active = false, retired_at = $1 WHERE active AND kid <> $2', [now, key.kid]);
      await db.query(
        `INSERT INTO signing_keys (kid, public_jwk, private_jwk, created_at, active) VALUES ($1, $2, $3, $4, true)
         ON CONFLICT (kid) DO UPDATE SET active = true, retired_at = NULL`,
        [key.kid, JSON.stringify(key.public_jwk), key.private_jwk === null ? null : JSON.stringify(key.private_jwk), now],
      );
    },
  };
}
