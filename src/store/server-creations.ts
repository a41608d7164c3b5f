import type { Queryable } from '../db/index.js';

// Servers created by reports, per source family (table server_creations): the shared,
// cross-instance count behind NEW_SERVERS_PER_SOURCE_PER_HOUR. Keys are source families (keyed
// hashes), never addresses; rows expire with the window.

const CREATION_LOCK_NAMESPACE = 72_620_900;

/** Call on a transaction's Queryable: the lock holds until it ends. */
export function serverCreationStore(tx: Queryable) {
  return {
    /** Serialises creations of one source family across instances until the transaction ends. */
    async lock(key: string): Promise<void> {
      await tx.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [CREATION_LOCK_NAMESPACE, key]);
    },
    /** Times of the creations under any of `keys` after `since`, oldest first. */
    async since(keys: readonly string[], since: Date): Promise<Date[]> {
      const rows = await tx.query<{ at: Date }>('SELECT at FROM server_creations WHERE source_key = ANY($1::text[]) AND at > $2 ORDER BY at', [keys, since]);
      return rows.map((r) => r.at);
    },
    async record(key: string, at: Date): Promise<void> {
      await tx.query('INSERT INTO server_creations (source_key, at) VALUES ($1, $2)', [key, at]);
    },
    /** Deletes creations that left the window. */
    async purgeBefore(cutoff: Date): Promise<void> {
      await tx.query('DELETE FROM server_creations WHERE at <= $1', [cutoff]);
    },
  };
}
