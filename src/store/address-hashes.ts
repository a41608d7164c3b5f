import { randomBytes } from 'node:crypto';
import type { Db, Queryable } from '../db/index.js';

// Keyed client-address hashing (DECISIONS.md "Client address"): the HMAC secrets live in the
// database so every instance hashes alike; one secret per UTC day, deleted after two days.

const REGISTRATION_LOCK_NAMESPACE = 72_620_700;

export function addressSecretStore(db: Queryable) {
  return {
    /** The secret of a UTC day (YYYY-MM-DD), created by whichever instance asks first. */
    async secretFor(day: string): Promise<string> {
      await db.query('INSERT INTO address_hash_secrets (day, secret) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING', [day, randomBytes(32).toString('base64')]);
      const rows = await db.query<{ secret: string }>('SELECT secret FROM address_hash_secrets WHERE day = $1', [day]);
      return rows[0]!.secret;
    },
    /** Forgets secrets older than `keepFrom`, so expired hashes cannot be linked to anything. */
    async purgeBefore(keepFrom: string): Promise<void> {
      await db.query('DELETE FROM address_hash_secrets WHERE day < $1', [keepFrom]);
    },
  };
}

/** Registration events per address hash (the shared, cross-instance registration limit). */
export function registrationStore(db: Db) {
  return {
    /**
     * Runs `decide` on the times of recent registrations of any of `hashes` under a transaction
     * lock on the address, recording a new event under `hashes[0]` when it allows, so concurrent
     * registrations from one address on any instance are counted exactly.
     */
    async attempt<T extends { allowed: boolean }>(hashes: string[], since: Date, at: Date, decide: (recent: Date[]) => T): Promise<T> {
      return db.transaction(async (tx) => {
        await tx.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [REGISTRATION_LOCK_NAMESPACE, hashes[0]]);
        const rows = await tx.query<{ at: Date }>('SELECT at FROM registration_events WHERE address_hash = ANY($1) AND at > $2 ORDER BY at', [hashes, since]);
        const decision = decide(rows.map((r) => r.at));
        if (decision.allowed) await tx.query('INSERT INTO registration_events (address_hash, at) VALUES ($1, $2)', [hashes[0], at]);
        return decision;
      });
    },
    /** Deletes events that left the window (they expire with it). */
    async purgeBefore(cutoff: Date): Promise<void> {
      await db.query('DELETE FROM registration_events WHERE at <= $1', [cutoff]);
    },
  };
}
