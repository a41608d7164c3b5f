import { isUniqueViolation, type Queryable } from '../db/index.js';
import { canonicalServerUrl, hasQuery, identityCandidate, InvalidServerUrl, looksLikeUrl, serverHandle, withoutQuery } from '../domain/server-identity.js';

// Server identity (docs/scoring.md "Server identity"). A server is its canonical URL; its name,
// slug and registry name are handles in one namespace (table server_handles, migration 1410),
// each bound to exactly one server and never moved by a request: a handle is bound when its
// server is created (the slug, by a trigger on servers) or by a catalogue import (the slug form
// of the registry name). Resolution: canonical URL first, then the handle; a catalogue import
// may take a registry name's handle from a server no catalogue lists (it is renamed), nothing
// else ever rebinds one.

export interface ServerRow {
  id: number;
  url: string;
  name: string;
  slug: string;
  category: string;
  registered_at: Date;
}

const COLUMNS = 'id, url, name, slug, category, registered_at';
const S_COLUMNS = 's.id, s.url, s.name, s.slug, s.category, s.registered_at';

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

/** A server no catalogue lists, renamed because a catalogue import bound its slug as a registry name. */
export interface DisplacedServer {
  url: string;
  registryName: string;
  from: { name: string; slug: string };
  to: { name: string; slug: string };
}

/** A registry name whose handle was already bound to another catalogue server (it resolves there). */
export interface RegistryConflict {
  registryName: string;
  url: string;
  boundTo: string;
}

export interface CatalogueUpsert {
  id: number;
  added: boolean;
  /** The registry name's handle resolves to this server (newly bound, or already). */
  bound: boolean;
  displaced: DisplacedServer | null;
  conflict: RegistryConflict | null;
}

/** How many identity candidates are tested per query while looking for a free one. */
const CANDIDATE_BATCH = 32;
/** Attempts when a concurrent writer takes the chosen identity between choosing and inserting. */
const CONFLICT_ATTEMPTS = 5;

/**
 * Retries `fn` when it fails on a unique constraint (another writer took the name, slug or
 * handle it chose): the next attempt chooses again. Each attempt must be its own statement or
 * transaction (a failed statement aborts a PostgreSQL transaction).
 */
export async function retryOnIdentityConflict<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!isUniqueViolation(err) || attempt >= CONFLICT_ATTEMPTS) throw err;
    }
  }
}

export function serverStore(db: Queryable) {
  /** The first free identity (name, slug) for `name`/`slug`, trying k = from, from + 1, ... */
  async function freeIdentity(name: string, slug: string, from = 1): Promise<{ name: string; slug: string }> {
    for (let k = from; ; k += CANDIDATE_BATCH) {
      const cands = Array.from({ length: CANDIDATE_BATCH }, (_, i) => identityCandidate(name, slug, k + i));
      // Names are compared with the database's lower(), the one its unique index uses.
      const [taken] = await db.query<{ handles: string[]; names: string[] }>(
        `SELECT ARRAY(SELECT handle FROM server_handles WHERE handle = ANY($1::text[])) AS handles,
                ARRAY(SELECT c FROM unnest($2::text[]) c WHERE EXISTS (SELECT 1 FROM servers WHERE lower(name) = lower(c))) AS names`,
        [cands.map((c) => c.slug), cands.map((c) => c.name)],
      );
      const handles = new Set(taken!.handles);
      const names = new Set(taken!.names);
      const free = cands.find((c) => !handles.has(c.slug) && !names.has(c.name));
      if (free) return free;
    }
  }

  /** The server bound to a handle, with how it is bound and whether a catalogue lists it. */
  async function holderOf(handle: string): Promise<{ id: number; name: string; slug: string; url: string; kind: string; catalogued: boolean } | null> {
    const rows = await db.query<{ id: number; name: string; slug: string; url: string; kind: string; catalogued: boolean }>(
      `SELECT s.id, s.name, s.slug, s.url, h.kind, (s.catalogued_at IS NOT NULL) AS catalogued
         FROM server_handles h JOIN servers s ON s.id = h.server_id WHERE h.handle = $1`,
      [handle],
    );
    return rows[0] ?? null;
  }

  const store = {
    /** The server with exactly this canonical URL (internal use; user input goes through lookupUrl). */
    /** The servers with these ids, by id. */
    async byIds(ids: readonly number[]): Promise<ServerRow[]> {
      if (ids.length === 0) return [];
      return db.query<ServerRow>(`SELECT ${COLUMNS} FROM servers WHERE id = ANY($1::int8[]) ORDER BY id`, [ids]);
    },

    async byUrl(url: string): Promise<ServerRow | null> {
      const rows = await db.query<ServerRow>(`SELECT ${COLUMNS} FROM servers WHERE url = $1`, [url]);
      return rows[0] ?? null;
    },

    /**
     * The server a canonical URL means (docs/scoring.md "Server identity"): the server with that
     * URL; for a URL with a query, the catalogue server with exactly that URL, else the server
     * with the URL without its query.
     */
    async lookupUrl(url: string): Promise<ServerRow | null> {
      if (!hasQuery(url)) return store.byUrl(url);
      const rows = await db.query<ServerRow>(
        `SELECT ${COLUMNS} FROM servers WHERE (url = $1 AND catalogued_at IS NOT NULL) OR url = $2 ORDER BY (url = $1) DESC LIMIT 1`,
        [url, withoutQuery(url)],
      );
      return rows[0] ?? null;
    },

    /**
     * Resolves what a user typed (canonical URL, registry name, name or slug; DECISIONS.md) to a
     * tracked server, or null. Anything with an http(s) scheme is a URL (lookupUrl); anything else
     * is a handle, compared by its slug form, so upper case, spaces and punctuation do not matter.
     */
    async resolve(target: string): Promise<ServerRow | null> {
      const t = target.trim();
      if (looksLikeUrl(t)) {
        try {
          return await store.lookupUrl(canonicalServerUrl(t));
        } catch (err) {
          if (err instanceof InvalidServerUrl) return null;
          throw err;
        }
      }
      const handle = serverHandle(t);
      if (handle === '') return null;
      const rows = await db.query<ServerRow>(`SELECT ${S_COLUMNS} FROM server_handles h JOIN servers s ON s.id = h.server_id WHERE h.handle = $1`, [handle]);
      return rows[0] ?? null;
    },

    /**
     * Inserts a server at `s.url` under the first free identity for `s.name`/`s.slug` (the name
     * and slug themselves, else `name (k)` / `slug-k`); null when the URL is already tracked.
     * One statement: on a concurrent identity conflict it throws a unique violation (retry).
     */
    async insertNew(s: { url: string; name: string; slug: string; category: string }, now: Date, extra: Partial<CatalogueFields> & { catalogued?: boolean } = {}): Promise<ServerRow | null> {
      const id = await freeIdentity(s.name, s.slug);
      const rows = await db.query<ServerRow>(
        `INSERT INTO servers (url, name, slug, category, registered_at, registry_name, title, description, repository_url, registry_version, transport, catalogued_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $12::boolean THEN $5::timestamptz END)
         ON CONFLICT (url) DO NOTHING RETURNING ${COLUMNS}`,
        [
          s.url,
          id.name,
          id.slug,
          s.category,
          now,
          extra.registry_name ?? null,
          extra.title ?? null,
          extra.description ?? null,
          extra.repository_url ?? null,
          extra.registry_version ?? null,
          extra.transport ?? null,
          extra.catalogued === true,
        ],
      );
      return rows[0] ?? null;
    },

    /**
     * The server at `s.url`, inserted if it is new (under a free identity; see insertNew). For
     * callers without a transaction (the demo loader, scripts); reports go through the telemetry
     * service, which bounds how many servers each source creates.
     */
    async ensure(s: { url: string; name: string; slug: string; category: string }, now: Date): Promise<ServerRow> {
      const known = await store.byUrl(s.url);
      if (known) return known;
      const inserted = await retryOnIdentityConflict(() => store.insertNew(s, now));
      if (inserted) return inserted;
      const row = await store.byUrl(s.url);
      if (!row) throw new Error(`server ${s.url} vanished after insert conflict`);
      return row;
    },

    /**
     * Tracks a catalogued remote or refreshes what the catalogue says about it (keyed by canonical
     * URL; call inside a transaction). A server already tracked keeps its name and slug; its
     * category becomes the catalogue's unless that is only `general`. Then binds the registry
     * name's handle to it when the handle is free, or held by a server no catalogue lists (that
     * server is renamed: `displaced`). A handle bound to another catalogue server stays where it is
     * (a second remote of the same registry server, or a `conflict` between two registry names
     * with the same slug form).
     */
    async upsertCatalogued(s: { url: string; category: string } & CatalogueFields, now: Date): Promise<CatalogueUpsert> {
      const handle = serverHandle(s.registry_name);
      let displaced: DisplacedServer | null = null;
      let holder = handle === '' ? null : await holderOf(handle);
      const existing = await store.byUrl(s.url);
      // A squatter: a server no catalogue lists holds the registry name's handle. The catalogue
      // decides what a registry name means, so the squatter takes the next free identity.
      if (holder && !holder.catalogued && holder.kind === 'slug' && holder.id !== existing?.id) {
        const to = await freeIdentity(holder.name, holder.slug, 2);
        await db.query('UPDATE servers SET name = $2, slug = $3 WHERE id = $1', [holder.id, to.name, to.slug]);
        displaced = { url: holder.url, registryName: s.registry_name, from: { name: holder.name, slug: holder.slug }, to };
        holder = null;
      }
      let id: number;
      let added = false;
      if (existing) {
        await db.query(
          `UPDATE servers SET registry_name = $2, title = $3, description = $4, repository_url = $5, registry_version = $6, transport = $7, catalogued_at = $8,
             category = CASE WHEN $9 = 'general' THEN category ELSE $9 END
           WHERE id = $1`,
          [existing.id, s.registry_name, s.title, s.description, s.repository_url, s.registry_version, s.transport, now, s.category],
        );
        id = existing.id;
      } else {
        const row = await store.insertNew({ url: s.url, name: s.registry_name, slug: handle, category: s.category }, now, { ...s, catalogued: true });
        if (!row) throw new Error(`catalogue server ${s.url} appeared during its import`);
        id = row.id;
        added = true;
        if (holder === null) holder = await holderOf(handle);
      }
      let bound = false;
      let conflict: RegistryConflict | null = null;
      if (handle !== '') {
        if (holder === null) {
          await db.query("INSERT INTO server_handles (handle, server_id, kind) VALUES ($1, $2, 'registry')", [handle, id]);
          bound = true;
        } else if (holder.id === id) {
          await db.query("UPDATE server_handles SET kind = 'registry' WHERE handle = $1", [handle]);
          bound = true;
        } else {
          const [other] = await db.query<{ registry_name: string | null }>('SELECT registry_name FROM servers WHERE id = $1', [holder.id]);
          // Another remote of the same registry server is not a conflict: the name means the first one imported.
          if (other?.registry_name?.toLowerCase() !== s.registry_name.toLowerCase()) conflict = { registryName: s.registry_name, url: s.url, boundTo: holder.url };
        }
      }
      return { id, added, bound, displaced, conflict };
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
  return store;
}

export type ServerStore = ReturnType<typeof serverStore>;
