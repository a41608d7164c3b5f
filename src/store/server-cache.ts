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
    /** Like serverStore.ensure, from memory when the server is known. */
    ensure(s: { url: string; name: string; slug: string; category: string }, now: Date): Promise<ServerRow> {
      const hit = byUrl.get(s.url);
      if (hit) return Promise.resolve(hit);
      let p = inflight.get(s.url);
      if (!p) {
        p = servers.ensure(s, now).then(remember).finally(() => inflight.delete(s.url));
        inflight.set(s.url, p);
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
