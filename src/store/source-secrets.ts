import { randomBytes } from 'node:crypto';
import type { Queryable } from '../db/index.js';

/**
 * The daily secret of the keyed client-address hash (DECISIONS.md "Client address and report
 * sources"). Kept in the database so every instance hashes an address alike on the same day;
 * secrets older than yesterday are deleted, so old hashes can no longer be recomputed or linked.
 */
export function sourceSecretStore(db: Queryable) {
  return {
    async forDay(day: string): Promise<Buffer> {
      await db.query('INSERT INTO source_secrets (day, secret) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING', [day, randomBytes(32)]);
      await db.query("DELETE FROM source_secrets WHERE day < $1::date - interval '1 day'", [day]);
      const rows = await db.query<{ secret: Uint8Array }>('SELECT secret FROM source_secrets WHERE day = $1', [day]);
      return Buffer.from(rows[0]!.secret);
    },
  };
}
