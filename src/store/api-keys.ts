import type { Queryable } from '../db/index.js';
import { perTurn } from './per-turn.js';

export interface ApiKeyRow {
  id: number;
  scopes: string[];
  trial_limit: number;
  trial_used: number;
  created_at: Date;
  /**
   * The key's source family (docs/integrity.md): HMAC(secret of the registration day, network of
   * the registering address), the `addr:` source of that network that day. Never the address;
   * null for keys registered before families existed or without a known address.
   */
  network_family: string | null;
}

// Any request may carry a made-up Bearer token (a report's counts as its address then): a flood
// of them, each a different hash no cache can hold, costs one statement per event-loop turn
// (src/store/per-turn.ts), not one per request.
const keysByHash = perTurn(async (db: Queryable, hashes: string[]) => {
  const rows = await db.query<ApiKeyRow & { key_hash: string }>(
    'SELECT key_hash, id, scopes, trial_limit, trial_used, created_at, network_family FROM api_keys WHERE key_hash = ANY($1::text[])',
    [hashes],
    { prepare: 'api_keys_by_hash' },
  );
  return new Map(rows.map(({ key_hash, ...row }) => [key_hash, row]));
});

/** Anonymous API keys, stored by SHA-256 hash only. */
export function apiKeyStore(db: Queryable) {
  return {
    async insert(k: { keyHash: string; scopes: readonly string[]; trialLimit: number; createdAt: Date; networkFamily: string | null }): Promise<void> {
      await db.query('INSERT INTO api_keys (key_hash, scopes, trial_limit, created_at, network_family) VALUES ($1, $2, $3, $4, $5)', [
        k.keyHash,
        k.scopes,
        k.trialLimit,
        k.createdAt,
        k.networkFamily,
      ]);
    },

    /** The key with this hash, or null; the hashes asked in one event-loop turn are read in one statement. */
    async byHash(keyHash: string): Promise<ApiKeyRow | null> {
      return (await keysByHash(db, keyHash)) ?? null;
    },

    /**
     * Spends one trial check atomically: one conditional UPDATE, so however many requests race,
     * no key ever exceeds its limit. Null when the key is unknown or its allowance is used up.
     */
    async spendTrial(keyHash: string, at: Date): Promise<{ id: number; remaining: number } | null> {
      const rows = await db.query<{ id: number; remaining: number }>(
        `UPDATE api_keys SET trial_used = trial_used + 1, last_used_at = $2
         WHERE key_hash = $1 AND trial_used < trial_limit
         RETURNING id, trial_limit - trial_used AS remaining`,
        [keyHash, at],
      );
      return rows[0] ?? null;
    },

    /** Gives a spent check back when the verdict could not be delivered. */
    async refundTrial(id: number): Promise<void> {
      await db.query('UPDATE api_keys SET trial_used = trial_used - 1 WHERE id = $1 AND trial_used > 0', [id]);
    },
  };
}

export type ApiKeyStore = ReturnType<typeof apiKeyStore>;
