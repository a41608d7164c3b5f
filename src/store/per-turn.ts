import type { Queryable } from '../db/index.js';

// Reads asked of one database handle in the same event-loop turn, answered by one statement.
// Under a flood of look-ups (each a different key, so no cache can hold them) the database then
// sees one statement per turn instead of one per request: one round trip, one wake-up of a
// backend and one pooled connection, however many requests the turn read.

/** At most this many keys share a statement; a larger turn starts another. */
export const PER_TURN_MAX_KEYS = 256;

/**
 * A reader that gathers the keys asked in one turn and reads them with `readMany` once, after the
 * turn (setImmediate); each caller gets its key's value or undefined. A key asked twice in a turn
 * is read once. A failed read fails the callers of its turn, as their own statements would have.
 */
export function perTurn<K, V>(readMany: (db: Queryable, keys: K[]) => Promise<Map<K, V>>): (db: Queryable, key: K) => Promise<V | undefined> {
  const open = new WeakMap<Queryable, { keys: Set<K>; result: Promise<Map<K, V>> }>();
  return (db, key) => {
    // PostgreSQL cannot store NUL in text, so no row has such a key, and one in the statement
    // would fail it for every caller of the turn: answered at once, never sent.
    if (typeof key === 'string' && key.includes('\u0000')) return Promise.resolve(undefined);
    let b = open.get(db);
    if (!b || b.keys.size >= PER_TURN_MAX_KEYS) {
      const keys = new Set<K>();
      const result = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        if (open.get(db)?.keys === keys) open.delete(db);
        return readMany(db, [...keys]);
      });
      b = { keys, result };
      open.set(db, b);
    }
    b.keys.add(key);
    return b.result.then((m) => m.get(key));
  };
}
