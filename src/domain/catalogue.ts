// The MCP Registry catalogue format (docs/observation.md): one page of the registry API's
// `GET /v0.1/servers` (or `/v0/servers`) list, `{servers: [{server: {name, title, description,
// version, repository, remotes: [{type, url}], packages}, _meta: {"io.modelcontextprotocol.
// registry/official": {status, publishedAt, updatedAt, statusChangedAt, statusMessage, isLatest}}}],
// metadata: {count, nextCursor}}`. Pure: the parser turns whatever arrives (hostile or not) into
// remotes to track with their listing status, servers the registry deleted, a count of local-only
// servers and skipped entries with their reasons. It never throws for a bad entry, only for a
// document that is not such a page at all.
import { isRfc3339 } from './rfc3339.js';
import { classifyCategory } from './category.js';
import { canonicalServerUrl, InvalidServerUrl, slugify } from './server-identity.js';

/** The document is not a registry page (wrong JSON shape); nothing in it is imported. */
export class CatalogueFormatError extends Error {}

export type RemoteTransport = 'streamable-http' | 'sse';
export const REMOTE_TRANSPORTS: readonly RemoteTransport[] = ['streamable-http', 'sse'];

/** Entries per page beyond which the page is refused (the registry serves at most 100). */
export const MAX_ENTRIES_PER_PAGE = 10_000;
/** Longest registry name, title, description, version and cursor kept. */
const LIMITS = { name: 200, title: 200, description: 2000, version: 100, cursor: 1000 } as const;
/** Registry names are reverse-DNS namespace / name (the registry's own pattern). */
const REGISTRY_NAME = /^[a-zA-Z0-9.-]+\/[a-zA-Z0-9._-]+$/;
/** The registry's extension member in `_meta`. */
export const OFFICIAL_META = 'io.modelcontextprotocol.registry/official';

/** The registry's status of an entry (`_meta` official `status`); anything else reads as active. */
export type RegistryStatus = 'active' | 'deprecated' | 'deleted';

/** What the registry says about an entry's listing. */
export interface ListingInfo {
  status: RegistryStatus;
  /** `statusMessage`: deprecation reason or migration hint; null when none. */
  statusMessage: string | null;
  /** `statusChangedAt`, RFC 3339 as given; null when absent or not a timestamp. */
  statusChangedAt: string | null;
  /** `updatedAt`, RFC 3339 as given; null when absent or not a timestamp. */
  updatedAt: string | null;
}

/** A server the registry deleted: tracked servers under this name stop being observed. */
export interface WithdrawnEntry extends ListingInfo {
  registryName: string;
}

/** One remote of a registry server, ready to be tracked. */
export interface CatalogueRemote {
  listing: ListingInfo;
  registryName: string;
  title: string | null;
  description: string | null;
  version: string | null;
  repositoryUrl: string | null;
  transport: RemoteTransport;
  /** Canonical server URL (src/domain/server-identity.ts). */
  url: string;
  slug: string;
  category: string;
}

export interface SkippedEntry {
  /** Registry name when the entry has one, else `entry <index>`. */
  name: string;
  reason: string;
}

export interface ParsedPage {
  /** Entries in the page. */
  entries: number;
  remotes: CatalogueRemote[];
  /** Registry names of servers that list only local packages (stdio, not observable over the network). */
  localOnly: string[];
  skipped: SkippedEntry[];
  /** Latest versions the registry marked deleted. */
  withdrawn: WithdrawnEntry[];
  /** The greatest entry `updatedAt` on the page (any entry), as given; null when none had one. */
  latestUpdate: string | null;
  /** Cursor of the next page, null on the last one. */
  nextCursor: string | null;
}

/** An RFC 3339 date-time naming a real time, the form the registry writes (`2025-10-21T09:14:03.412918Z`). */
function timestamp(v: unknown): string | null {
  return typeof v === 'string' && v.length <= 40 && isRfc3339(v) && !Number.isNaN(Date.parse(v)) ? v : null;
}

/**
 * Orders two RFC 3339 timestamps (negative when a is earlier). Date.parse keeps milliseconds;
 * the registry writes microseconds, so equal milliseconds are ordered by the digits after them.
 */
export function compareTimestamps(a: string, b: string): number {
  const d = Date.parse(a) - Date.parse(b);
  if (d !== 0) return d;
  const frac = (t: string) => (/\.(\d+)/.exec(t)?.[1] ?? '').padEnd(9, '0');
  return frac(a) < frac(b) ? -1 : frac(a) > frac(b) ? 1 : 0;
}

/** The later of two optional timestamps. */
export function laterTimestamp(a: string | null, b: string | null): string | null {
  if (a === null) return b;
  if (b === null) return a;
  return compareTimestamps(a, b) >= 0 ? a : b;
}

function listingOf(official: Record<string, unknown> | null): ListingInfo {
  const status = official?.status === 'deprecated' || official?.status === 'deleted' ? official.status : 'active';
  return {
    status,
    statusMessage: text(official?.statusMessage, 500),
    statusChangedAt: timestamp(official?.statusChangedAt),
    updatedAt: timestamp(official?.updatedAt),
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A display string: control characters removed, whitespace collapsed, cut to `max`; null when empty or not a string. */
function text(v: unknown, max: number): string | null {
  if (typeof v !== 'string') return null;
  // eslint-disable-next-line no-control-regex
  const clean = v.replace(/[\u0000-\u001f\u007f]+/g, ' ').replace(/\s+/g, ' ').trim();
  if (clean === '') return null;
  return clean.length > max ? `${clean.slice(0, max - 1)}…` : clean;
}

function repositoryUrl(v: unknown): string | null {
  if (!isObject(v) || typeof v.url !== 'string') return null;
  try {
    const u = new URL(v.url);
    return (u.protocol === 'https:' || u.protocol === 'http:') && !u.username && !u.password && v.url.length <= 2048 ? u.href : null;
  } catch {
    return null;
  }
}

/** Parses one registry page. Throws CatalogueFormatError only when `doc` is not a page at all. */
export function parseRegistryPage(doc: unknown): ParsedPage {
  if (!isObject(doc)) throw new CatalogueFormatError('not an MCP Registry server list: expected a JSON object with a "servers" array');
  if (!Array.isArray(doc.servers)) throw new CatalogueFormatError('not an MCP Registry server list: "servers" is missing or not an array');
  if (doc.servers.length > MAX_ENTRIES_PER_PAGE) throw new CatalogueFormatError(`the page lists ${doc.servers.length} entries, more than the ${MAX_ENTRIES_PER_PAGE} accepted`);
  const meta = isObject(doc.metadata) ? doc.metadata : {};
  let nextCursor: string | null = null;
  if (meta.nextCursor !== undefined && meta.nextCursor !== null && meta.nextCursor !== '') {
    if (typeof meta.nextCursor !== 'string' || meta.nextCursor.length > LIMITS.cursor) throw new CatalogueFormatError('metadata.nextCursor is not a string of at most 1000 characters');
    nextCursor = meta.nextCursor;
  }

  const out: ParsedPage = { entries: doc.servers.length, remotes: [], localOnly: [], skipped: [], withdrawn: [], latestUpdate: null, nextCursor };
  doc.servers.forEach((entry: unknown, index: number) => {
    const label = `entry ${index}`;
    const entryOfficial = isObject(entry) && isObject(entry._meta) && isObject(entry._meta[OFFICIAL_META]) ? entry._meta[OFFICIAL_META] : null;
    // Every entry moves the sync's high-water mark, whatever becomes of it.
    out.latestUpdate = laterTimestamp(out.latestUpdate, timestamp(entryOfficial?.updatedAt));
    if (!isObject(entry) || !isObject(entry.server)) {
      out.skipped.push({ name: label, reason: 'no "server" object' });
      return;
    }
    const s = entry.server;
    if (typeof s.name !== 'string' || s.name.length > LIMITS.name || !REGISTRY_NAME.test(s.name)) {
      out.skipped.push({ name: typeof s.name === 'string' && s.name.length <= LIMITS.name ? text(s.name, LIMITS.name) ?? label : label, reason: 'no valid registry name (namespace/name)' });
      return;
    }
    const name = s.name;
    const official = entryOfficial;
    if (official?.isLatest === false) {
      out.skipped.push({ name, reason: 'not the latest version' });
      return;
    }
    const listing = listingOf(official);
    if (listing.status === 'deleted') {
      out.withdrawn.push({ registryName: name, ...listing });
      return;
    }
    const remotes = Array.isArray(s.remotes) ? s.remotes : [];
    const packages = Array.isArray(s.packages) ? s.packages : [];
    if (s.remotes !== undefined && !Array.isArray(s.remotes)) {
      out.skipped.push({ name, reason: '"remotes" is not an array' });
      return;
    }
    if (remotes.length === 0) {
      if (packages.length > 0) out.localOnly.push(name);
      else out.skipped.push({ name, reason: 'lists neither remotes nor packages' });
      return;
    }
    const title = text(s.title, LIMITS.title);
    const description = text(s.description, LIMITS.description);
    const base = {
      listing,
      registryName: name,
      title,
      description,
      version: text(s.version, LIMITS.version),
      repositoryUrl: repositoryUrl(s.repository),
      slug: slugify(name),
      category: classifyCategory([name, title ?? '', description ?? '']),
    };
    const seen = new Set<string>();
    const found: CatalogueRemote[] = [];
    remotes.forEach((r: unknown, ri: number) => {
      const where = `${name} remote ${ri}`;
      if (!isObject(r)) return out.skipped.push({ name: where, reason: 'not an object' });
      if (typeof r.type !== 'string' || !REMOTE_TRANSPORTS.includes(r.type as RemoteTransport)) {
        return out.skipped.push({ name: where, reason: `transport ${JSON.stringify(typeof r.type === 'string' ? r.type.slice(0, 40) : r.type ?? null)} is not streamable-http or sse` });
      }
      if (typeof r.url !== 'string') return out.skipped.push({ name: where, reason: 'no url' });
      if (/[{}]/.test(r.url)) return out.skipped.push({ name: where, reason: 'the url is a template that needs variables' });
      let url: string;
      try {
        url = canonicalServerUrl(r.url);
      } catch (err) {
        if (err instanceof InvalidServerUrl) return out.skipped.push({ name: where, reason: `bad url: ${err.message}` });
        throw err;
      }
      if (seen.has(url)) return;
      seen.add(url);
      found.push({ ...base, transport: r.type as RemoteTransport, url });
    });
    // streamable-http first: it is the one a registry name resolves to when a server offers both.
    found.sort((a, b) => (a.transport === b.transport ? 0 : a.transport === 'streamable-http' ? -1 : 1));
    out.remotes.push(...found);
  });
  return out;
}
