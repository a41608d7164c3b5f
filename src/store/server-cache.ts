import type { Queryable } from '../db/index.js';
import { withoutQuery } from '../domain/server-identity.js';
import { serverStore, type ServerRow } from './servers.js';
import { BoundedMap } from './cache-limits.js';
import { dbSignal } from './db-signal.js';


/**
 * Server rows for ingestion, kept in memory: a server row never changes except its category,
 * which only moves once from 'general' to a refined one (and a rename by a catalogue import,
 * which ingestion does not read). Saves the lookup a report of an already known server costs.
 */
export function serverCache(db: Queryable) {
  const servers = serverStore(db);
  // Bounded by CACHE_MAX_ENTRIES (src/store/cache-limits.ts): the oldest rows go first.
  const byUrl = new BoundedMap<string, ServerRow>();
  const inflight = new Map<string, Promise<ServerRow>>();

  /** Runs `fn` once for concurrent callers of the same key. */
  function once(key: string, fn: () => Promise<ServerRow>): Promise<ServerRow> {
    let p = inflight.get(key);
    if (!p) {
      p = fn().finally(() => inflight.delete(key));
      inflight.set(key, p);
    }
    return p;
  }

  function remember(key: string, row: ServerRow): ServerRow {
    byUrl.set(key, row);
    return row;
  }

  return {
    /**
     * The server a report for the canonical URL `url` is about (docs/scoring.md "Server
     * identity"): the server with that URL; for a URL with a query, the catalogue server with
     * exactly that URL, else the query-less server. When there is none, `create` is called with
     * the query-less URL (a report never creates a server whose URL carries a query) and its row
     * is remembered. Concurrent reports of one new server share one `create`.
     */
    forReport(url: string, create: (url: string) => Promise<ServerRow>): Promise<ServerRow> {
      const hit = byUrl.get(url);
      if (hit) return Promise.resolve(hit);
      return once(url, async () => {
        // A URL with a query may be a catalogue server's own: only the database knows.
        const known = await servers.lookupUrl(url);
        if (known) return remember(known.url, known);
        const bare = withoutQuery(url);
        return once(`create ${bare}`, async () => remember(bare, await create(bare)));
      });
    },

    /** Sets a refined category (only over 'general') and keeps the cached row in step. */
    async setCategory(row: ServerRow, category: string): Promise<void> {
      await servers.setCategory(row.id, category);
      const hit = byUrl.get(row.url);
      if (hit) byUrl.set(row.url, { ...hit, category });
    },
  };
}

const identityChanged = dbSignal();

/**
 * Tells this process's remembered lookups (rememberedHits) that what an identifier resolves to
 * may have changed: a catalogue import bound a registry name, renamed a server that held one, or
 * tracked a URL with a query. Other processes see the change when their entries expire.
 */
export function notifyIdentityChanged(db: Queryable): void {
  identityChanged.emit(db);
}

/**
 * `lookup` with its found rows remembered for `ttlMs` (a miss is never remembered, so a server
 * tracked a moment later is found at once), forgotten at once on notifyIdentityChanged(db).
 * Bounded: beyond `maxEntries` it starts over.
 */
export function rememberedHits(db: Queryable, lookup: (key: string) => Promise<ServerRow | null>, ttlMs: number): (key: string) => Promise<ServerRow | null> {
  const hits = new BoundedMap<string, { row: ServerRow; mono: number }>();
  identityChanged.on(db, () => hits.clear());
  return async (key) => {
    const hit = hits.get(key);
    if (hit && performance.now() - hit.mono < ttlMs) return hit.row;
    const row = await lookup(key);
    if (row) {
      hits.set(key, { row, mono: performance.now() });
    }
    return row;
  };
}
