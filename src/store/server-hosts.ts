import type { Queryable } from '../db/index.js';

// Tracked servers by origin, for telemetry that names a server only by `server.address` and
// `server.port` (OTLP, docs/telemetry.md): which canonical server URLs live at these origins.

const likeEscape = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`);

export function serverHostStore(db: Queryable) {
  return {
    /**
     * Canonical URLs of tracked servers that are one of `origins` (`https://host[:port]`) or
     * lie below one (a path or a query after it); at most `limit`, the origins themselves first.
     */
    async urlsAtOrigins(origins: readonly string[], limit: number): Promise<string[]> {
      const patterns = origins.flatMap((o) => [`${likeEscape(o)}/%`, `${likeEscape(o)}?%`]);
      const rows = await db.query<{ url: string }>(`SELECT url FROM servers WHERE url = ANY($1::text[]) OR url LIKE ANY($2::text[]) ORDER BY (url = ANY($1::text[])) DESC, url LIMIT $3`, [
        origins,
        patterns,
        limit,
      ]);
      return rows.map((r) => r.url);
    },
  };
}
