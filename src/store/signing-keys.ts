import type { Db, Queryable } from '../db/index.js';

export interface StoredKey {
  kid: string;
  public_jwk: Record<string, string>;
  /** The private JWK sealed under the key-encryption secret; null once retired or revoked, and for SIGNING_KEY_JWK keys. */
  private_key_enc: string | null;
  created_at: Date;
  /** Tokens this key signed after this instant are not ours; null while it is the active key. */
  retired_at: Date | null;
  /** Set: the key verifies nothing and is no longer published. */
  revoked_at: Date | null;
  active: boolean;
}

/** A private key an earlier version stored in clear (before migration 1400). */
export interface LegacyClearKey {
  kid: string;
  private_jwk: Record<string, string>;
  active: boolean;
}

const COLS = 'kid, public_jwk, private_key_enc, created_at, retired_at, revoked_at, active';

export function signingKeyStore(db: Queryable) {
  return {
    async all(): Promise<StoredKey[]> {
      return db.query<StoredKey>(`SELECT ${COLS} FROM signing_keys ORDER BY created_at, kid`);
    },
    async active(): Promise<StoredKey | null> {
      return (await db.query<StoredKey>(`SELECT ${COLS} FROM signing_keys WHERE active`))[0] ?? null;
    },
    async byKid(kid: string): Promise<StoredKey | null> {
      return (await db.query<StoredKey>(`SELECT ${COLS} FROM signing_keys WHERE kid = $1`, [kid]))[0] ?? null;
    },
    /**
     * Makes `key` the only active key. The previous active key retires at `retireAt` (it keeps
     * verifying what it signed until then) and its private half is destroyed now. A key that was
     * ever retired or revoked is never made active again (the caller checks; the WHERE enforces).
     */
    async activate(key: { kid: string; public_jwk: object; private_key_enc: string | null }, now: Date, retireAt: Date): Promise<void> {
      await db.query(
        'UPDATE signing_keys SET active = false, retired_at = $1, private_key_enc = NULL, private_jwk = NULL WHERE active AND kid <> $2',
        [retireAt, key.kid],
      );
      const rows = await db.query(
        `INSERT INTO signing_keys (kid, public_jwk, private_key_enc, created_at, active) VALUES ($1, $2, $3, $4, true)
         ON CONFLICT (kid) DO UPDATE SET active = true WHERE signing_keys.retired_at IS NULL AND signing_keys.revoked_at IS NULL
         RETURNING kid`,
        [key.kid, JSON.stringify(key.public_jwk), key.private_key_enc, now],
      );
      if (rows.length !== 1) throw new Error(`signing key ${key.kid} was retired or revoked earlier and cannot become active again`);
    },
    /** Revokes a key: it stops being active, its private half is destroyed, and it verifies nothing. */
    async revoke(kid: string, now: Date): Promise<void> {
      await db.query(
        'UPDATE signing_keys SET active = false, revoked_at = $2, retired_at = COALESCE(retired_at, $2), private_key_enc = NULL, private_jwk = NULL WHERE kid = $1',
        [kid, now],
      );
    },
    /** Private keys still in clear from before migration 1400. */
    async legacyClearKeys(): Promise<LegacyClearKey[]> {
      return db.query<LegacyClearKey>('SELECT kid, private_jwk, active FROM signing_keys WHERE private_jwk IS NOT NULL');
    },
    /** Replaces a clear private key by its sealed form (or by nothing: destroyed). */
    async seal(kid: string, sealed: string | null): Promise<void> {
      await db.query('UPDATE signing_keys SET private_jwk = NULL, private_key_enc = $2 WHERE kid = $1', [kid, sealed]);
    },
  };
}

/**
 * After clear private keys were overwritten: rewrites the table so no dead row version keeps the
 * old bytes, and on PGlite also retires the write-ahead log that recorded them (segments are
 * removed, not recycled, and a checkpoint makes them unneeded). PostgreSQL's own WAL, archives
 * and backups are the operator's (docs/receipts.md "Keys at rest"). Runs outside a transaction.
 */
export async function scrubSigningKeyTable(db: Db): Promise<void> {
  await db.exec('VACUUM FULL signing_keys');
  if (db.kind !== 'pglite') return;
  await db.exec('SET wal_recycle = off');
  for (let i = 0; i < 2; i++) {
    await db.query('SELECT pg_switch_wal()');
    await db.exec('CHECKPOINT');
  }
  await db.exec('RESET wal_recycle');
}
