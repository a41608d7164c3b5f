import type { Queryable } from '../db/index.js';
import { serverStore, type ServerRow } from './servers.js';

/** Most server rows kept in memory; beyond that the cache starts over (bounded memory). */
const MAX_ENTRIES = 50_000;

/**
 * Server rows for ingestion, kept in memory: a server row never changes except its category,
 * which only moves once from 'general' to a refined one. Saves the INSERT ... ON CONFLICT and the
 * SELECT that `serverStore.ensure` costs on every report of an already known server.
 */
export function serverCache(db: Queryable) {
  const servers = serverStore(db);
  const byUrl = new Map<string, ServerRow>();
  const inflight = new Map<string, Promise<ServerRow>>();

  function remember(row: ServerRow): ServerRow {
    if (byUrl.size >= MAX_ENTRIES) byUrl.clear();
    byUrl.set(row.url, row);
    return row;
  }

  return {
    /**
     * Like serverStore.ensure, from memory when the server is known. `describe` (name, slug,
     * category of a new server) is only called when the server is not in memory.
     */
    ensure(url: string, describe: () => { name: string; slug: string; category: string }, now: Date): Promise<ServerRow> {
      const hit = byUrl.get(url);
      if (hit) return Promise.resolve(hit);
      let p = inflight.get(url);
      if (!p) {
        p = servers.ensure({ url, ...describe() }, now).then(remember).finally(() => inflight.delete(url));
        inflight.set(url, p);
      }
      return p;
    },

    /** Sets a refined category (only over 'general') and keeps the cached row in step. */
    async setCategory(row: ServerRow, category: string): Promise<void> {
      await servers.setCategory(row.id, category);
      const hit = byUrl.get(row.url);
      if (hit) byUrl.set(row.url, { ...hit, category });
    },
  };
}

/**
 * `lookup` with its found rows remembered for `ttlMs` (a miss is never remembered, so a server
 * tracked a moment later is found at once). Bounded: beyond `maxEntries` it starts over.
 */
export function rememberedHits(lookup: (key: string) => Promise<ServerRow | null>, ttlMs: number, maxEntries = 100_000): (key: string) => Promise<ServerRow | null> {
  const hits = new Map<string, { row: ServerRow; mono: number }>();
  return async (key) => {
    const hit = hits.get(key);
    if (hit && performance.now() - hit.mono < ttlMs) return hit.row;
    const row = await lookup(key);
    if (row) {
      if (hits.size >= maxEntries) hits.clear();
      hits.set(key, { row, mono: performance.now() });
    }
    return row;
  };
}
