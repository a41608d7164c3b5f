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

/** What a catalogue import (the MCP Registry) says about one remote (docs/observation.md). */
export interface CatalogueFields {
  registry_name: string;
  title: string | null;
  description: string | null;
  repository_url: string | null;
  registry_version: string | null;
  transport: 'streamable-http' | 'sse';
}

export interface CatalogueRow extends ServerRow, Omit<CatalogueFields, 'transport'> {
  transport: string | null;
  catalogued_at: Date | null;
}

export function serverStore(db: Queryable) {
  return {
    async byUrl(url: string): Promise<ServerRow | null> {
      const rows = await db.query<ServerRow>(`SELECT ${COLUMNS} FROM servers WHERE url = $1`, [url]);
      return rows[0] ?? null;
    },

    /**
     * Resolves what a user typed (canonical URL, name, MCP Registry name or slug; DECISIONS.md) to
     * a tracked server. Returns null when nothing matches. An exact name wins over a registry
     * name, which wins over a slug; among equals the oldest wins (a registry server's
     * streamable-http remote is imported before its sse one).
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
        `SELECT ${COLUMNS} FROM servers WHERE lower(name) = lower($1) OR lower(registry_name) = lower($1) OR slug = $2
          ORDER BY (lower(name) = lower($1)) DESC, (lower(registry_name) = lower($1)) IS TRUE DESC, registered_at, id LIMIT 1`,
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

    /**
     * Tracks a catalogued remote or refreshes what the catalogue says about it (idempotent: keyed
     * by canonical URL). A server already tracked keeps its name and slug; its category becomes
     * the catalogue's unless that is only `general`. `added` is true when the row is new.
     */
    async upsertCatalogued(
      s: { url: string; name: string; slug: string; category: string } & CatalogueFields,
      now: Date,
    ): Promise<{ id: number; added: boolean }> {
      const rows = await db.query<{ id: number; added: boolean }>(
        `INSERT INTO servers AS e (url, name, slug, category, registered_at, registry_name, title, description, repository_url, registry_version, transport, catalogued_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $5)
         ON CONFLICT (url) DO UPDATE SET
           registry_name = EXCLUDED.registry_name, title = EXCLUDED.title, description = EXCLUDED.description,
           repository_url = EXCLUDED.repository_url, registry_version = EXCLUDED.registry_version, transport = EXCLUDED.transport,
           catalogued_at = EXCLUDED.catalogued_at,
           category = CASE WHEN EXCLUDED.category = 'general' THEN e.category ELSE EXCLUDED.category END
         RETURNING id, (xmax = 0) AS added`,
        [s.url, s.name, s.slug, s.category, now, s.registry_name, s.title, s.description, s.repository_url, s.registry_version, s.transport],
      );
      return rows[0]!;
    },

    /** Catalogue metadata of a server (null members when it was never imported). */
    async catalogue(id: number): Promise<CatalogueRow | null> {
      const rows = await db.query<CatalogueRow>(
        `SELECT ${COLUMNS}, registry_name, title, description, repository_url, registry_version, transport, catalogued_at FROM servers WHERE id = $1`,
        [id],
      );
      return rows[0] ?? null;
    },

    async setCategory(id: number, category: string): Promise<void> {
      await db.query('UPDATE servers SET category = $2 WHERE id = $1', [id, category]);
    },
  };
}

export type ServerStore = ReturnType<typeof serverStore>;
