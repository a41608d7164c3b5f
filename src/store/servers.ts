import type { Queryable } from '../db/index.js';
import { canonicalServerUrl, looksLikeUrl, slugify, InvalidServerUrl } from '../domain/server-identity.js';

export interface ServerRow {
  id: number;
  url: string;
  name: string;
  slug: string;
  category: string;
  registered_at: Date;
}

const COLUMNS = 'id, url, name, slug, category, registered_at';

export function serverStore(db: Queryable) {
  return {
    async byUrl(url: string): Promise<ServerRow | null> {
      const rows = await db.query<ServerRow>(`SELECT ${COLUMNS} FROM servers WHERE url = $1`, [url]);
      return rows[0] ?? null;
    },

    /**
     * Resolves what a user typed (canonical URL, name or slug; DECISIONS.md) to a tracked server.
     * Returns null when nothing matches; when several names share a slug the oldest wins.
     */
    async resolve(target: string): Promise<ServerRow | null> {
      const t = target.trim();
      if (looksLikeUrl(t)) {
        try {
          return await this.byUrl(canonicalServerUrl(t));
        } catch (err) {
          if (err instanceof InvalidServerUrl) return null;
          throw err;
        }
      }
      const rows = await db.query<ServerRow>(
        `SELECT ${COLUMNS} FROM servers WHERE lower(name) = lower($1) OR slug = $2 ORDER BY (lower(name) = lower($1)) DESC, registered_at, id LIMIT 1`,
        [t, slugify(t)],
      );
      return rows[0] ?? null;
    },

    /** Inserts the server if it is new; returns the stored row either way. */
    async ensure(s: { url: string; name: string; slug: string; category: string }, now: Date): Promise<ServerRow> {
      const inserted = await db.query<ServerRow>(
        `INSERT INTO servers (url, name, slug, category, registered_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (url) DO NOTHING RETURNING ${COLUMNS}`,
        [s.url, s.name, s.slug, s.category, now],
      );
      if (inserted[0]) return inserted[0];
      const row = await this.byUrl(s.url);
      if (!row) throw new Error(`server ${s.url} vanished after insert conflict`);
      return row;
    },

    async setCategory(id: number, category: string): Promise<void> {
      await db.query('UPDATE servers SET category = $2 WHERE id = $1', [id, category]);
    },
  };
}

export type ServerStore = ReturnType<typeof serverStore>;
