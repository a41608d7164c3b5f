// Catalogue import (docs/observation.md): tracks every remote MCP server an MCP Registry lists,
// without runtime evidence (UNRATED until someone, or the observatory's own probes, reports).
// Reads one page from a file, or follows `nextCursor` through a registry URL (API v0.1, or v0)
// with the safe outbound client, optionally only entries `updated_since` a time (the registry
// sync, src/services/registry-sync.ts). Records each listing's status (active, deprecated); a
// server the registry deleted is marked so and no longer probed. Idempotent: keyed by canonical
// URL, a second import only refreshes metadata.
import { readFile, stat } from 'node:fs/promises';
import type { Config } from '../config.js';
import { isUniqueViolation, type Db } from '../db/index.js';
import { CatalogueFormatError, laterTimestamp, parseRegistryPage, type ParsedPage, type SkippedEntry } from '../domain/catalogue.js';
import { looksLikeUrl } from '../domain/server-identity.js';
import { createSafeFetcher, ProbeFailed, TargetRefused, type SafeFetcher } from '../probes/safe-fetch.js';
import { observationStore } from '../store/observation.js';
import { registrySyncStore } from '../store/registry-sync.js';
import { notifyIdentityChanged } from '../store/server-cache.js';
import { retryOnIdentityConflict, serverStore, type DisplacedServer, type RegistryConflict } from '../store/servers.js';
import { notifyServersChanged } from '../store/telemetry.js';

/** Largest catalogue file read, and largest registry page fetched. */
export const CATALOGUE_LIMITS = { maxFileBytes: 64 * 1024 * 1024, maxPageBytes: 8 * 1024 * 1024, maxPages: 1000, pageTimeoutMs: 30_000 } as const;
/** Skipped entries listed in a summary (all are counted). */
const MAX_LISTED_SKIPS = 200;

/** The import could not be made at all (unreadable file, unreachable registry, not a registry page). */
export class CatalogueImportError extends Error {}

export interface ImportedServer {
  registryName: string;
  url: string;
  transport: string;
  category: string;
  added: boolean;
}

export interface ImportSummary {
  source: string;
  pages: number;
  entries: number;
  /** Remotes newly tracked by this import. */
  added: number;
  /** Remotes already tracked whose catalogue metadata was refreshed. */
  updated: number;
  /** Servers that list only local packages: counted, not tracked. */
  localOnly: number;
  skippedCount: number;
  /** Skipped entries with reasons (at most 200 listed). */
  skipped: SkippedEntry[];
  servers: ImportedServer[];
  /** Remotes the registry lists as deprecated (tracked and observed; the status is shown). */
  deprecated: number;
  /** Entries the registry marks deleted, and the tracked servers under them now marked deleted (no longer probed). */
  withdrawn: { entries: number; servers: number; names: string[] };
  /** The greatest entry updatedAt seen (the registry sync's next updated_since); null when none. */
  latestUpdate: string | null;
  /** Why pagination stopped early (cursor loop, page limit), if it did. */
  stoppedEarly: string | null;
  /**
   * Servers no catalogue lists that held a registry name imported now (they had the same name or
   * slug): renamed to the next free `name (k)` / `slug-k`; the registry name means the catalogue
   * server from now on (docs/scoring.md "Server identity").
   */
  displaced: DisplacedServer[];
  /**
   * Registry names whose slug form another catalogue server already holds under a different
   * registry name: they keep resolving to that server; the remote is tracked under its URL and
   * a suffixed slug.
   */
  conflicts: RegistryConflict[];
}

/** Registry API list paths, newest first: a registry base URL is read at the first that answers. */
export const REGISTRY_LIST_PATHS = ['/v0.1/servers', '/v0/servers'] as const;

/**
 * The list URLs to try for what a user gave: a registry base URL (nothing or "/" as path) means
 * its /v0.1/servers, then /v0/servers (older registries); any other URL is taken as the list itself.
 */
export function registryListUrls(given: URL): URL[] {
  if (given.pathname !== '/' && given.pathname !== '') return [given];
  return REGISTRY_LIST_PATHS.map((p) => {
    const u = new URL(given.href);
    u.pathname = p;
    return u;
  });
}

export interface ImportUrlOptions {
  /** Only entries updated since this RFC 3339 time (the registry's `updated_since`; deleted entries included). */
  updatedSince?: string | null;
}

export function createCatalogueService({ db, config, now }: { db: Db; config: Pick<Config, 'allowPrivateTargets'>; now: () => Date }, opts: { fetcher?: SafeFetcher } = {}) {
  const fetcher = opts.fetcher ?? createSafeFetcher({ allowPrivate: config.allowPrivateTargets });
  function emptySummary(source: string): ImportSummary {
    return {
      source,
      pages: 0,
      entries: 0,
      added: 0,
      updated: 0,
      localOnly: 0,
      skippedCount: 0,
      skipped: [],
      servers: [],
      deprecated: 0,
      withdrawn: { entries: 0, servers: 0, names: [] },
      latestUpdate: null,
      stoppedEarly: null,
      displaced: [],
      conflicts: [],
    };
  }

  /** Writes one parsed page; each remote in its own short transaction (server row + schedule row). */
  async function store(page: ParsedPage, summary: ImportSummary): Promise<void> {
    summary.pages++;
    summary.entries += page.entries;
    summary.localOnly += page.localOnly.length;
    summary.skippedCount += page.skipped.length;
    summary.latestUpdate = laterTimestamp(summary.latestUpdate, page.latestUpdate);
    for (const s of page.skipped) if (summary.skipped.length < MAX_LISTED_SKIPS) summary.skipped.push(s);
    const at = now();
    const date = (t: string | null) => (t === null ? null : new Date(t));
    for (const w of page.withdrawn) {
      const ids = await db.transaction((tx) => registrySyncStore(tx).withdraw(w.registryName, { message: w.statusMessage, changedAt: date(w.statusChangedAt), updatedAt: date(w.updatedAt) }));
      if (ids.length > 0) notifyServersChanged(db, ids);
      summary.withdrawn.entries++;
      summary.withdrawn.servers += ids.length;
      if (summary.withdrawn.names.length < MAX_LISTED_SKIPS) summary.withdrawn.names.push(w.registryName);
    }
    // The bulk path first: one transaction for the page's plain cases (new remotes under free
    // names, re-imports of remotes that hold their registry name); a concurrent writer that took
    // an identity meanwhile rolls it back, and the whole page goes the one-by-one way below.
    const listing = (r: (typeof page.remotes)[number]) => ({ status: r.listing.status, message: r.listing.statusMessage, changedAt: date(r.listing.statusChangedAt), updatedAt: date(r.listing.updatedAt) });
    let bulk = new Map<string, { id: number; added: boolean }>();
    try {
      bulk = await db.transaction(async (tx) => {
        const done = await serverStore(tx).upsertCataloguedMany(
          page.remotes.map((r) => ({ url: r.url, category: r.category, registry_name: r.registryName, title: r.title, description: r.description, repository_url: r.repositoryUrl, registry_version: r.version, transport: r.transport })),
          at,
        );
        const handled = page.remotes.filter((r) => done.has(r.url));
        await registrySyncStore(tx).setListings(handled.map((r) => ({ serverId: done.get(r.url)!.id, ...listing(r) })));
        await observationStore(tx).scheduleMany(handled.map((r) => done.get(r.url)!.id), at);
        return done;
      });
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
    }
    if (bulk.size > 0) {
      notifyServersChanged(db, [...bulk.values()].map((b) => b.id));
      if ([...bulk.values()].some((b) => b.added)) notifyIdentityChanged(db);
    }
    for (const r of page.remotes) {
      const b = bulk.get(r.url);
      if (b) {
        if (r.listing.status === 'deprecated') summary.deprecated++;
        if (b.added) summary.added++;
        else summary.updated++;
        summary.servers.push({ registryName: r.registryName, url: r.url, transport: r.transport, category: r.category, added: b.added });
        continue;
      }
      // Each remote in its own transaction, chosen again if a concurrent writer took its identity.
      const res = await retryOnIdentityConflict(() =>
        db.transaction(async (tx) => {
          const row = await serverStore(tx).upsertCatalogued(
            {
              url: r.url,
              category: r.category,
              registry_name: r.registryName,
              title: r.title,
              description: r.description,
              repository_url: r.repositoryUrl,
              registry_version: r.version,
              transport: r.transport,
            },
            at,
          );
          await registrySyncStore(tx).setListing(row.id, {
            status: r.listing.status,
            message: r.listing.statusMessage,
            changedAt: date(r.listing.statusChangedAt),
            updatedAt: date(r.listing.updatedAt),
          });
          // Due at once: the first observation round probes newly catalogued servers (and ones the
          // registry lists again after deleting them).
          await observationStore(tx).schedule(row.id, at);
          return row;
        }),
      );
      if (r.listing.status === 'deprecated') summary.deprecated++;
      notifyServersChanged(db, [res.id]);
      if (res.added || res.bound || res.displaced) notifyIdentityChanged(db);
      if (res.added) summary.added++;
      else summary.updated++;
      if (res.displaced) summary.displaced.push(res.displaced);
      if (res.conflict) summary.conflicts.push(res.conflict);
      summary.servers.push({ registryName: r.registryName, url: r.url, transport: r.transport, category: r.category, added: res.added });
    }
  }

  function parseJson(text: string, where: string): unknown {
    try {
      return JSON.parse(text) as unknown;
    } catch (err) {
      throw new CatalogueImportError(`${where} is not valid JSON (${(err as Error).message.slice(0, 120)})`);
    }
  }

  function parse(doc: unknown, where: string): ParsedPage {
    try {
      return parseRegistryPage(doc);
    } catch (err) {
      if (err instanceof CatalogueFormatError) throw new CatalogueImportError(`${where}: ${err.message}`);
      throw err;
    }
  }

  /** Imports one registry page already in memory (its nextCursor is not followed). */
  async function importDocument(doc: unknown, source = 'document'): Promise<ImportSummary> {
    const summary = emptySummary(source);
    await store(parse(doc, source), summary);
    return summary;
  }

  async function importFile(path: string): Promise<ImportSummary> {
    let size: number;
    try {
      const st = await stat(path);
      if (!st.isFile()) throw new CatalogueImportError(`${path} is not a file`);
      size = st.size;
    } catch (err) {
      if (err instanceof CatalogueImportError) throw err;
      throw new CatalogueImportError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (size > CATALOGUE_LIMITS.maxFileBytes) throw new CatalogueImportError(`${path} is ${size} bytes, more than the ${CATALOGUE_LIMITS.maxFileBytes}-byte limit`);
    const text = await readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new CatalogueImportError(`cannot read ${path}: ${err.code ?? err.message}`);
    });
    const summary = emptySummary(path);
    const page = parse(parseJson(text, path), path);
    await store(page, summary);
    if (page.nextCursor !== null) summary.stoppedEarly = 'the file is one page and names a next page (metadata.nextCursor); import the registry URL to follow every page';
    return summary;
  }

  /** One page: the registry's JSON, or why not (404 is reported apart, for the v0 fallback). */
  async function fetchPage(pageUrl: URL): Promise<{ status: 404 } | { status: 200; body: string }> {
    try {
      const res = await fetcher.request(pageUrl, { headers: { accept: 'application/json' }, maxBytes: CATALOGUE_LIMITS.maxPageBytes, totalTimeoutMs: CATALOGUE_LIMITS.pageTimeoutMs });
      if (res.status === 404) return { status: 404 };
      if (res.status !== 200) throw new CatalogueImportError(`${pageUrl.href} answered HTTP ${res.status}`);
      return { status: 200, body: res.text() };
    } catch (err) {
      if (err instanceof TargetRefused) throw new CatalogueImportError(`registry refused: ${err.reason}`);
      if (err instanceof ProbeFailed) throw new CatalogueImportError(`registry unreachable: ${err.message}`);
      throw err;
    }
  }

  /**
   * Follows `nextCursor` (query parameter `cursor`) until the last page, a repeated cursor or the
   * page limit. A registry base URL reads /v0.1/servers, or /v0/servers where v0.1 is not served.
   */
  async function importUrl(url: string, opts: ImportUrlOptions = {}): Promise<ImportSummary> {
    let given: URL;
    try {
      given = new URL(url);
    } catch {
      throw new CatalogueImportError(`not a URL: ${url}`);
    }
    const candidates = registryListUrls(given);
    let base = candidates[0]!;
    const summary = emptySummary(url);
    const seen = new Set<string>();
    let cursor: string | null = null;
    const urlOf = (c: string | null) => {
      const u = new URL(base.href);
      if (c !== null) u.searchParams.set('cursor', c);
      if (opts.updatedSince) u.searchParams.set('updated_since', opts.updatedSince);
      return u;
    };
    // The next page is fetched while this one is stored (one page ahead at most).
    let prefetched: { cursor: string; got: Promise<{ status: 404 } | { status: 200; body: string }> } | null = null;
    for (;;) {
      if (summary.pages >= CATALOGUE_LIMITS.maxPages) {
        summary.stoppedEarly = `stopped after ${CATALOGUE_LIMITS.maxPages} pages`;
        break;
      }
      const pageUrl = urlOf(cursor);
      const got = prefetched !== null && prefetched.cursor === cursor ? await prefetched.got : await fetchPage(pageUrl);
      prefetched = null;
      if (got.status === 404) {
        // The first page of a base URL's newest API path is missing: try the next (v0.1, then v0).
        const next = summary.pages === 0 ? candidates[candidates.indexOf(base) + 1] : undefined;
        if (next) {
          base = next;
          continue;
        }
        throw new CatalogueImportError(`${pageUrl.href} answered HTTP 404${candidates.length > 1 ? ` (tried ${candidates.map((c) => c.pathname).join(' and ')})` : ''}`);
      }
      const page = parse(parseJson(got.body, pageUrl.href), pageUrl.href);
      if (page.nextCursor !== null && !seen.has(page.nextCursor) && summary.pages + 1 < CATALOGUE_LIMITS.maxPages) {
        const ahead = { cursor: page.nextCursor, got: fetchPage(urlOf(page.nextCursor)) };
        // Awaited on the next turn of the loop; a failure while this page is stored is not unhandled.
        ahead.got.catch(() => {});
        prefetched = ahead;
      }
      await store(page, summary);
      if (page.nextCursor === null) break;
      if (seen.has(page.nextCursor)) {
        summary.stoppedEarly = `the registry repeated cursor ${JSON.stringify(page.nextCursor.slice(0, 80))}; stopped to avoid a loop`;
        break;
      }
      seen.add(page.nextCursor);
      cursor = page.nextCursor;
    }
    summary.source = base.href;
    return summary;
  }

  return {
    importDocument,
    importFile,
    importUrl,
    /** A registry URL (http/https) or a file path. */
    import(source: string, opts: ImportUrlOptions = {}): Promise<ImportSummary> {
      if (opts.updatedSince && !looksLikeUrl(source)) throw new CatalogueImportError('updated_since applies to a registry URL, not to a file');
      return looksLikeUrl(source) ? importUrl(source, opts) : importFile(source);
    },
  };
}

export type CatalogueService = ReturnType<typeof createCatalogueService>;
