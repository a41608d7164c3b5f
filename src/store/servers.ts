import { isUniqueViolation, type Queryable } from '../db/index.js';
import { perTurn } from './per-turn.js';
import {
  canonicalServerUrl,
  chooseByHandle,
  hasQuery,
  identityCandidate,
  InvalidServerUrl,
  looksLikeUrl,
  MAX_HANDLE_CANDIDATES,
  serverHandle,
  urlsSpelledBy,
  withoutQuery,
  type HandleCandidate,
} from '../domain/server-identity.js';

// Server identity (docs/scoring.md "Server identity"). A server is its canonical URL; its name,
// slug and registry name are handles in one namespace (table server_handles, migration 1410),
// each bound to exactly one server and never moved by a request: a handle is bound when its
// server is created (the slug, by a trigger on servers) or by a catalogue import (the slug form
// of the registry name). Resolution (resolveTarget): canonical URL, then a registry name, then
// the URL a host/path target spells, then a name or slug, which is never first-come when several
// tracked URLs have that slug (chooseByHandle). A catalogue import may take a registry name's
// handle from a server no catalogue lists (it is renamed), nothing else ever rebinds one.

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

// What a user typed, resolved for many requests at once: the URLs and handles asked in one
// event-loop turn are read in one statement each (src/store/per-turn.ts), so that a flood of
// look-ups of servers nobody tracks (each a different key, a miss no cache can hold) costs the
// database a statement per turn, not one per request.
const serversByUrl = perTurn(async (db: Queryable, urls: string[]) => {
  const rows = await db.query<ServerRow>(`SELECT ${COLUMNS} FROM servers WHERE url = ANY($1::text[])`, [urls], { prepare: 'servers_by_url' });
  return new Map(rows.map((r) => [r.url, r]));
});
type HandleRow = ServerRow & HandleCandidate;
// Per handle: the server it is bound to, and the servers whose URL's own slug it is (expression
// index of migration 1650), at most MAX_HANDLE_CANDIDATES + 1 of those: chooseByHandle decides.
const serversByHandle = perTurn(async (db: Queryable, handles: string[]) => {
  const rows = await db.query<HandleRow & { handle: string }>(
    `SELECT q.handle, c.* FROM unnest($1::text[]) AS q(handle) CROSS JOIN LATERAL (
       SELECT ${S_COLUMNS}, (s.catalogued_at IS NOT NULL) AS catalogued, h.kind
         FROM server_handles h JOIN servers s ON s.id = h.server_id WHERE h.handle = q.handle
       UNION ALL
       (SELECT ${S_COLUMNS}, (s.catalogued_at IS NOT NULL) AS catalogued, NULL::text AS kind
          FROM servers s WHERE server_url_slug(s.url) = q.handle ORDER BY s.id LIMIT $2)
     ) c`,
    [handles, MAX_HANDLE_CANDIDATES + 1],
    { prepare: 'servers_by_handle_v2' },
  );
  const out = new Map<string, HandleRow[]>();
  for (const { handle, ...row } of rows) {
    const list = out.get(handle);
    if (list) list.push(row);
    else out.set(handle, [row]);
  }
  return out;
});

const serverRow = (r: HandleRow): ServerRow => ({ id: r.id, url: r.url, name: r.name, slug: r.slug, category: r.category, registered_at: r.registered_at });

/** What a target resolves to: a server, or none; `ambiguous` lists the servers a handle names when it names several (the handle then answers none). */
export interface Resolution {
  server: ServerRow | null;
  ambiguous: string[];
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

    /**
     * Tracked servers per category, all categories in one statement: every category baseline
     * states its server count, and at catalogue scale one pass over the table every
     * SCORE_CACHE_MS is far cheaper than a count per category (each a heap visit of its rows until
     * vacuum has set the visibility map; issue 23).
     */
    async countsByCategory(): Promise<Map<string, number>> {
      const rows = await db.query<{ category: string; n: number }>('SELECT category, count(*)::int8 AS n FROM servers GROUP BY category');
      return new Map(rows.map((r) => [r.category, Number(r.n)]));
    },

    /** The server with exactly this URL, or null; the URLs asked in one event-loop turn are read in one statement. */
    async byUrl(url: string): Promise<ServerRow | null> {
      return (await serversByUrl(db, url)) ?? null;
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
        { prepare: 'server_by_url_query' },
      );
      return rows[0] ?? null;
    },

    /**
     * Resolves what a user typed (canonical URL, registry name, name or slug; DECISIONS.md) to a
     * tracked server, or null. Anything with an http(s) scheme is a URL (lookupUrl); anything else
     * is a handle, compared by its slug form, so upper case, spaces and punctuation do not matter.
     */
    async resolve(target: string): Promise<ServerRow | null> {
      return (await store.resolveTarget(target)).server;
    },

    /**
     * resolve, saying why a handle answered no server when it names several. Order (docs/scoring.md
     * "Server identity"): a target with a scheme is a URL; else a registry name's binding; else a
     * target of the form host/path is the URL it spells (https, then http; urlsSpelledBy) and
     * nothing else; else a handle (chooseByHandle: never first-come when several servers' URLs
     * have that slug).
     */
    async resolveTarget(target: string): Promise<Resolution> {
      const none: Resolution = { server: null, ambiguous: [] };
      const t = target.trim();
      if (looksLikeUrl(t)) {
        try {
          return { server: await store.lookupUrl(canonicalServerUrl(t)), ambiguous: [] };
        } catch (err) {
          if (err instanceof InvalidServerUrl) return none;
          throw err;
        }
      }
      const handle = serverHandle(t);
      const candidates = handle === '' ? [] : ((await serversByHandle(db, handle)) ?? []);
      const registry = candidates.find((c) => c.kind === 'registry');
      if (registry) return { server: serverRow(registry), ambiguous: [] };
      const spelled = urlsSpelledBy(t);
      if (spelled.length > 0) {
        const found = await Promise.all(spelled.map((u) => store.lookupUrl(u)));
        return { server: found.find((r) => r !== null) ?? null, ambiguous: [] };
      }
      const choice = chooseByHandle(handle, candidates);
      if (choice === null) return none;
      if ('chosen' in choice) return { server: serverRow(choice.chosen), ambiguous: [] };
      return { server: null, ambiguous: choice.ambiguous.map((c) => c.url) };
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

    /**
     * The bulk form of upsertCatalogued for one registry page (call inside a transaction): in a
     * handful of statements it tracks every remote whose URL is new and whose registry name is
     * free as a name and as a handle (the common case of a first import), and refreshes every
     * remote already tracked whose registry name is bound to itself (the common case of a
     * re-import). It returns what it did per URL; the remotes it leaves out (taken names,
     * squatters, conflicts, repeats within the page) go through upsertCatalogued one by one.
     * A concurrent writer taking a chosen identity meanwhile makes the insert fail with a unique
     * violation: the caller rolls back and takes the one-by-one path for the whole page.
     */
    async upsertCataloguedMany(items: readonly ({ url: string; category: string } & CatalogueFields)[], now: Date): Promise<Map<string, { id: number; added: boolean }>> {
      const out = new Map<string, { id: number; added: boolean }>();
      if (items.length === 0) return out;
      const handles = items.map((i) => serverHandle(i.registry_name));
      const lowerNames = items.map((i) => i.registry_name.toLowerCase());
      const [taken] = await db.query<{ existing: { id: number; url: string }[] | null; holders: { handle: string; server_id: number }[] | null; names: string[] }>(
        `SELECT (SELECT json_agg(json_build_object('id', id, 'url', url)) FROM servers WHERE url = ANY($1::text[])) AS existing,
                (SELECT json_agg(json_build_object('handle', handle, 'server_id', server_id)) FROM server_handles WHERE handle = ANY($2::text[])) AS holders,
                ARRAY(SELECT lower(name) FROM servers WHERE lower(name) = ANY($3::text[])) AS names`,
        [items.map((i) => i.url), handles, lowerNames],
      );
      const existing = new Map((taken!.existing ?? []).map((e) => [e.url, Number(e.id)]));
      const holders = new Map((taken!.holders ?? []).map((h) => [h.handle, Number(h.server_id)]));
      const names = new Set(taken!.names);
      const count = (xs: string[]) => xs.reduce((m, x) => m.set(x, (m.get(x) ?? 0) + 1), new Map<string, number>());
      const urlCount = count(items.map((i) => i.url));
      const handleCount = count(handles);
      const nameCount = count(lowerNames);
      const fresh: number[] = [];
      const refresh: { i: number; id: number }[] = [];
      items.forEach((it, i) => {
        const h = handles[i]!;
        if (h === '' || urlCount.get(it.url)! > 1 || handleCount.get(h)! > 1 || nameCount.get(lowerNames[i]!)! > 1) return;
        const id = existing.get(it.url);
        if (id === undefined) {
          if (!holders.has(h) && !names.has(lowerNames[i]!)) fresh.push(i);
        } else if (holders.get(h) === id) refresh.push({ i, id });
      });
      if (fresh.length > 0) {
        const f = fresh.map((i) => items[i]!);
        // The slug trigger binds each slug as a handle; the registry name is that handle.
        const rows = await db.query<{ id: number; url: string }>(
          `INSERT INTO servers (url, name, slug, category, registered_at, registry_name, title, description, repository_url, registry_version, transport, catalogued_at)
           SELECT u.url, u.name, u.slug, u.category, $10::timestamptz, u.name, u.title, u.description, u.repo, u.version, u.transport, $10::timestamptz
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[]) AS u(url, name, slug, category, title, description, repo, version, transport)
           RETURNING id, url`,
          [
            f.map((x) => x.url),
            f.map((x) => x.registry_name),
            fresh.map((i) => handles[i]!),
            f.map((x) => x.category),
            f.map((x) => x.title),
            f.map((x) => x.description),
            f.map((x) => x.repository_url),
            f.map((x) => x.registry_version),
            f.map((x) => x.transport),
            now,
          ],
        );
        await db.query("UPDATE server_handles SET kind = 'registry' WHERE handle = ANY($1::text[]) AND kind <> 'registry'", [fresh.map((i) => handles[i]!)]);
        for (const r of rows) out.set(r.url, { id: Number(r.id), added: true });
      }
      if (refresh.length > 0) {
        const f = refresh.map(({ i }) => items[i]!);
        await db.query(
          `UPDATE servers s SET registry_name = u.name, title = u.title, description = u.description, repository_url = u.repo, registry_version = u.version,
                  transport = u.transport, catalogued_at = $9::timestamptz, category = CASE WHEN u.category = 'general' THEN s.category ELSE u.category END
             FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS u(id, name, title, description, repo, version, transport, category)
            WHERE s.id = u.id`,
          [
            refresh.map((r) => r.id),
            f.map((x) => x.registry_name),
            f.map((x) => x.title),
            f.map((x) => x.description),
            f.map((x) => x.repository_url),
            f.map((x) => x.registry_version),
            f.map((x) => x.transport),
            f.map((x) => x.category),
            now,
          ],
        );
        await db.query("UPDATE server_handles SET kind = 'registry' WHERE handle = ANY($1::text[]) AND kind <> 'registry'", [refresh.map(({ i }) => handles[i]!)]);
        refresh.forEach(({ id }, k) => out.set(f[k]!.url, { id, added: false }));
      }
      return out;
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
