import type { Queryable } from '../db/index.js';
import { SOURCE_FAMILY_SQL } from './observation.js';
import { settleRollups } from './rollup-aggregator.js';

// Tracked servers by origin, for telemetry that names a server only by `server.address` and
// `server.port` (OTLP, docs/telemetry.md): which canonical server URLs live at these origins.

const likeEscape = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`);

/** A tracked server at an origin, with what makes it established there. */
export interface ServerAtOrigin {
  url: string;
  /** A catalogue (MCP Registry) lists it. */
  catalogued: boolean;
  /** Independent source families with evidence on it (the observatory's own probes are not one). */
  families: number;
}

export function serverHostStore(db: Queryable) {
  return {
    /**
     * Canonical URLs of tracked servers that are one of `origins` (`https://host[:port]`) or
     * lie below one (a path or a query after it); at most `limit`, the origins themselves first.
     */
    async urlsAtOrigins(origins: readonly string[], limit: number): Promise<string[]> {
      return (await this.atOrigins(origins, limit, false)).map((s) => s.url);
    },

    /**
     * The tracked servers at `origins` (as urlsAtOrigins, in URL order, at most `limit`), with
     * whether a catalogue lists each and, when `withFamilies` and there are several, from how
     * many independent source families it has evidence (the rollups are settled first for this
     * process's own reports; 0 otherwise: a lone server needs no comparison).
     */
    async atOrigins(origins: readonly string[], limit: number, withFamilies = true): Promise<ServerAtOrigin[]> {
      const patterns = origins.flatMap((o) => [`${likeEscape(o)}/%`, `${likeEscape(o)}?%`]);
      const rows = await db.query<{ id: number; url: string; catalogued: boolean }>(
        `SELECT id, url, catalogued_at IS NOT NULL AS catalogued FROM servers WHERE url = ANY($1::text[]) OR url LIKE ANY($2::text[])
          ORDER BY (url = ANY($1::text[])) DESC, url LIMIT $3`,
        [origins, patterns, limit],
      );
      if (!withFamilies || rows.length < 2) return rows.map((r) => ({ url: r.url, catalogued: r.catalogued, families: 0 }));
      const ids = rows.map((r) => Number(r.id));
      await settleRollups(db, ids);
      const counts = await db.query<{ server_id: number; families: number }>(
        `SELECT server_id, count(DISTINCT ${SOURCE_FAMILY_SQL})::int AS families FROM trust_evidence
          WHERE server_id = ANY($1::int8[]) AND source NOT LIKE 'observatory:%' GROUP BY server_id`,
        [ids],
      );
      const families = new Map(counts.map((c) => [Number(c.server_id), Number(c.families)]));
      return rows.map((r) => ({ url: r.url, catalogued: r.catalogued, families: families.get(Number(r.id)) ?? 0 }));
    },
  };
}
