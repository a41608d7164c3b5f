// Catalogue import (docs/observation.md): tracks every remote MCP server an MCP Registry lists,
// without runtime evidence (UNRATED until someone, or the observatory's own probes, reports).
// Reads one page from a file, or follows `nextCursor` through a registry URL with the safe
// outbound client. Idempotent: keyed by canonical URL, a second import only refreshes metadata.
import { readFile, stat } from 'node:fs/promises';
import type { Config } from '../config.js';
import type { Db } from '../db/index.js';
import { CatalogueFormatError, parseRegistryPage, type ParsedPage, type SkippedEntry } from '../domain/catalogue.js';
import { looksLikeUrl } from '../domain/server-identity.js';
import { createSafeFetcher, ProbeFailed, TargetRefused, type SafeFetcher } from '../probes/safe-fetch.js';
import { observationStore } from '../store/observation.js';
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

export function createCatalogueService({ db, config, now }: { db: Db; config: Pick<Config, 'allowPrivateTargets'>; now: () => Date }, opts: { fetcher?: SafeFetcher } = {}) {
  const fetcher = opts.fetcher ?? createSafeFetcher({ allowPrivate: config.allowPrivateTargets });
  function emptySummary(source: string): ImportSummary {
    return { source, pages: 0, entries: 0, added: 0, updated: 0, localOnly: 0, skippedCount: 0, skipped: [], servers: [], stoppedEarly: null, displaced: [], conflicts: [] };
  }

  /** Writes one parsed page; each remote in its own short transaction (server row + schedule row). */
  async function store(page: ParsedPage, summary: ImportSummary): Promise<void> {
    summary.pages++;
    summary.entries += page.entries;
    summary.localOnly += page.localOnly.length;
    summary.skippedCount += page.skipped.length;
    for (const s of page.skipped) if (summary.skipped.length < MAX_LISTED_SKIPS) summary.skipped.push(s);
    const at = now();
    for (const r of page.remotes) {
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
          // Due at once: the first observation round probes newly catalogued servers.
          await observationStore(tx).schedule(row.id, at);
          return row;
        }),
      );
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

  /** Follows `nextCursor` (query parameter `cursor`) until the last page, a repeated cursor or the page limit. */
  async function importUrl(url: string): Promise<ImportSummary> {
    let base: URL;
    try {
      base = new URL(url);
    } catch {
      throw new CatalogueImportError(`not a URL: ${url}`);
    }
    const summary = emptySummary(url);
    const seen = new Set<string>();
    let cursor: string | null = null;
    for (;;) {
      if (summary.pages >= CATALOGUE_LIMITS.maxPages) {
        summary.stoppedEarly = `stopped after ${CATALOGUE_LIMITS.maxPages} pages`;
        break;
      }
      const pageUrl = new URL(base.href);
      if (cursor !== null) pageUrl.searchParams.set('cursor', cursor);
      let body: string;
      try {
        const res = await fetcher.request(pageUrl, { headers: { accept: 'application/json' }, maxBytes: CATALOGUE_LIMITS.maxPageBytes, totalTimeoutMs: CATALOGUE_LIMITS.pageTimeoutMs });
        if (res.status !== 200) throw new CatalogueImportError(`${pageUrl.href} answered HTTP ${res.status}`);
        body = res.text();
      } catch (err) {
        if (err instanceof TargetRefused) throw new CatalogueImportError(`registry refused: ${err.reason}`);
        if (err instanceof ProbeFailed) throw new CatalogueImportError(`registry unreachable: ${err.message}`);
        throw err;
      }
      const page = parse(parseJson(body, pageUrl.href), pageUrl.href);
      await store(page, summary);
      if (page.nextCursor === null) break;
      if (seen.has(page.nextCursor)) {
        summary.stoppedEarly = `the registry repeated cursor ${JSON.stringify(page.nextCursor.slice(0, 80))}; stopped to avoid a loop`;
        break;
      }
      seen.add(page.nextCursor);
      cursor = page.nextCursor;
    }
    return summary;
  }

  return {
    importDocument,
    importFile,
    importUrl,
    /** A registry URL (http/https) or a file path. */
    import(source: string): Promise<ImportSummary> {
      return looksLikeUrl(source) ? importUrl(source) : importFile(source);
    },
  };
}

export type CatalogueService = ReturnType<typeof createCatalogueService>;
