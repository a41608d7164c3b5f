// Server identity (DECISIONS.md "Servers: identity, tracking, category"): a server is its
// canonical URL; name and slug are derived from it and resolve to it as well.

import { stringMemo } from './string-memo.js';

export class InvalidServerUrl extends Error {}

const MAX_URL_LENGTH = 2048;

// Every hot path (report, trust read, pre-flight, gate decision) canonicalises the URL a client
// sent, and the same few URLs arrive again and again: parsing one with URL costs 0.4-1 µs, a
// lookup of the same text a fraction of that. Refusals are computed each time; at most 8,192
// answers of at most 256 characters: under 7 MB however many distinct URLs clients send.
const canonicalMemo = stringMemo(canonicalize, { maxEntries: 8192, maxLength: 256 });

/**
 * Canonical form: lower-case scheme and host (URL does that), default port, trailing slash and
 * fragment dropped, query kept. Only http and https; credentials in the URL are refused so
 * that we never store a secret someone pasted. Beyond what WHATWG URL does (docs/scoring.md
 * "Server identity"), spellings of one address are one URL: the host's trailing dots go (the
 * fully qualified `alpha.example.` is `alpha.example`), and path and query are normalised per
 * RFC 3986 section 6.2.2 (percent-encoded unreserved characters decoded, the hex of every other
 * escape upper-cased, a `%` that starts no escape written `%25`, the characters URL leaves raw
 * but RFC 3986 does not allow there, such as `|`, `[`, `^` or `{`, percent-encoded). A host with
 * an empty label (`a..example`) names nothing and is refused.
 */
export function canonicalServerUrl(input: string): string {
  // A non-string (a caller's unchecked JSON) is refused by canonicalize, never looked up.
  return typeof input === 'string' ? canonicalMemo(input) : canonicalize(input);
}

/** How many canonical URLs are remembered (tests hold the bound). */
export const canonicalMemoSize = (): number => canonicalMemo.size();

function canonicalize(input: string): string {
  if (typeof input !== 'string' || input.length === 0) throw new InvalidServerUrl('a server URL is required');
  if (input.length > MAX_URL_LENGTH) throw new InvalidServerUrl(`a server URL must be at most ${MAX_URL_LENGTH} characters`);
  let u: URL;
  try {
    u = new URL(input.trim());
  } catch {
    throw new InvalidServerUrl('not an absolute URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InvalidServerUrl('only http and https URLs are accepted');
  if (u.username || u.password) throw new InvalidServerUrl('URLs with credentials are not accepted');
  if (!u.hostname) throw new InvalidServerUrl('the URL has no host');
  let hostname = u.hostname;
  if (!hostname.startsWith('[')) {
    hostname = hostname.replace(/\.+$/, '');
    if (hostname === '') throw new InvalidServerUrl('the URL has no host');
    if (hostname.split('.').includes('')) throw new InvalidServerUrl('the host has an empty label');
  }
  let path = normalizeEscapes(u.pathname, PATH_RAW).replace(/\/+$/, '');
  if (path === '/') path = '';
  const search = u.search === '' ? '' : `?${normalizeEscapes(u.search.slice(1), QUERY_RAW)}`;
  return `${u.protocol}//${hostname}${u.port ? `:${u.port}` : ''}${path}${search}`;
}

/** RFC 3986 unreserved characters: a percent-encoded one is the character itself. */
const UNRESERVED = /^[A-Za-z0-9._~-]$/;
/** Characters a path may carry unencoded (pchar and `/`, RFC 3986 section 3.3), escapes aside. */
const PATH_RAW = /^[A-Za-z0-9._~!$&'()*+,;=:@/-]$/;
/** Characters a query may carry unencoded (section 3.4). */
const QUERY_RAW = /^[A-Za-z0-9._~!$&'()*+,;=:@/?-]$/;

const escapeByte = (b: number) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`;

/**
 * A path or query (as URL serialised it) in RFC 3986 normal form (section 6.2.2): an escape of
 * an unreserved character is that character, every other escape has upper-case hex, a `%` that
 * starts no escape is `%25`, and a character the component may not carry raw is escaped (URL
 * leaves some raw, e.g. `|`; it has already escaped spaces, controls and non-ASCII, so what is
 * left is ASCII). Idempotent: its output is its own normal form.
 */
function normalizeEscapes(s: string, raw: RegExp): string {
  if (!/[^A-Za-z0-9._~!$&'()*+,;=:@/?-]/.test(s)) return s;
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c === '%') {
      const hex = s.slice(i + 1, i + 3);
      if (/^[0-9A-Fa-f]{2}$/.test(hex)) {
        const ch = String.fromCharCode(parseInt(hex, 16));
        out += UNRESERVED.test(ch) ? ch : `%${hex.toUpperCase()}`;
        i += 2;
      } else out += '%25';
    } else if (raw.test(c)) out += c;
    else for (const b of Buffer.from(c, 'utf8')) out += escapeByte(b);
  }
  return out;
}

/** True when the input parses as an absolute http(s) URL (then it is resolved as a URL). */
export function looksLikeUrl(input: string): boolean {
  return /^https?:\/\//i.test(input.trim());
}

/** Default display name: host plus path. */
export function serverNameFromUrl(canonicalUrl: string): string {
  const u = new URL(canonicalUrl);
  const path = u.pathname === '/' ? '' : u.pathname;
  return `${u.host}${path}`;
}

/** The name in lower-case kebab form: every run of other characters becomes one dash. */
export function slugify(name: string): string {
  return name
    .toLowerCase()
    .normalize('NFKD')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

/** True when a canonical URL carries a query string. */
export function hasQuery(canonicalUrl: string): boolean {
  return canonicalUrl.includes('?');
}

/**
 * The canonical URL without its query (docs/scoring.md "Server identity"): a query is part of a
 * server's identity only when a catalogue server has that exact URL, so a report or a lookup
 * whose query the catalogue does not list means the query-less server. Canonical URLs carry no
 * fragment, and the path's trailing slash was dropped before the query, so cutting at `?` leaves
 * a canonical URL.
 */
export function withoutQuery(canonicalUrl: string): string {
  const q = canonicalUrl.indexOf('?');
  return q === -1 ? canonicalUrl : canonicalUrl.slice(0, q);
}

/**
 * The handle an identifier resolves by: its slug form. Names, slugs and registry names are one
 * namespace of handles, each bound to exactly one server (table server_handles), so two
 * identifiers with the same slug form are the same identifier. Empty when the identifier has no
 * letter or digit (it then resolves to nothing).
 */
export const serverHandle = (identifier: string): string => slugify(identifier.trim());

/** Slug of a name that has no letter or digit at all (a slug is never empty). */
const EMPTY_SLUG = 'server';

/**
 * The k-th identity candidate for a server named `name` whose natural slug is `slug` (k >= 1):
 * the name and slug themselves, then `name (k)` and `slug-k`. Deterministic: a server that
 * collides takes the smallest k whose slug is not a bound handle and whose name is unused, so
 * slugify(candidate name) stays the candidate slug.
 */
export function identityCandidate(name: string, slug: string, k: number): { name: string; slug: string } {
  const base = slug === '' ? EMPTY_SLUG : slug;
  return k <= 1 ? { name, slug: base } : { name: `${name} (${k})`, slug: `${base}-${k}` };
}

/**
 * The canonical URLs a target without a scheme spells, best first (docs/scoring.md "Server
 * identity"): a target of the form host[:port][/path][?query], with no white space and a host that
 * has a dot or a port or is followed by a path (`alpha.example/mcp`, `ALPHA.EXAMPLE/MCP`,
 * `localhost:8080`), means `https://target`, then `http://target`. Empty for anything else (a
 * slug, a name with spaces or a suffix like ` (2)`, a single word): those are handles only.
 */
export function urlsSpelledBy(target: string): string[] {
  const t = target.trim();
  if (t === '' || looksLikeUrl(t) || /\s/.test(t)) return [];
  const authority = /^[^/?#]*/.exec(t)![0];
  const m = /^(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/.exec(authority);
  if (!m) return [];
  if (!authority.includes('.') && !authority.startsWith('[') && m[1] === undefined && authority.length === t.length) return [];
  const out: string[] = [];
  for (const scheme of ['https', 'http']) {
    try {
      out.push(canonicalServerUrl(`${scheme}://${t}`));
    } catch (err) {
      if (!(err instanceof InvalidServerUrl)) throw err;
    }
  }
  return out;
}

/** The slug a canonical URL's own name has (slugify of serverNameFromUrl); SQL server_url_slug (migration 1650) is the same. */
export const urlSlug = (canonicalUrl: string): string => slugify(serverNameFromUrl(canonicalUrl));

/**
 * True when `handle` spells the canonical URL exactly, as far as a slug can: the URL's own name
 * (host and path) is lower-case letters and digits in runs joined by single `.`, `/`, `:` or `-`,
 * its host has a dot (a domain name or an IPv4 address, not a single word such as
 * `alpha-example-mcp`, which every slug spells), it has no query, and its slug is the handle. The
 * slug then loses only which separator stood where; `http://alpha.example/mcp`,
 * `https://alpha.example/MCP` or `https://alpha.example/mcp;` are spelled less exactly.
 */
export function spellsUrl(handle: string, canonicalUrl: string): boolean {
  if (hasQuery(canonicalUrl)) return false;
  const u = new URL(canonicalUrl);
  if (!u.hostname.includes('.')) return false;
  const name = serverNameFromUrl(canonicalUrl);
  return /^[a-z0-9]+(?:[./:-][a-z0-9]+)*$/.test(name) && slugify(name) === handle;
}

/** A server a handle may mean: the one it is bound to (`kind`), or one whose URL's own slug it is. */
export interface HandleCandidate {
  id: number;
  url: string;
  catalogued: boolean;
  /** How the handle is bound to this server (`slug` or `registry`); null when it is only the slug of its URL. */
  kind: string | null;
}

/** More candidates than this for one handle: it is ambiguous (only a registry binding still answers). */
export const MAX_HANDLE_CANDIDATES = 32;

export type HandleChoice<T extends HandleCandidate> = { chosen: T } | { ambiguous: T[] } | null;

/**
 * Which server a handle (name or slug, by its slug form) means (docs/scoring.md "Server
 * identity"), given the server it is bound to and every server whose URL's own slug it is. A
 * registry name's binding is the catalogue's word: it answers. One candidate: it. Several: the
 * handle is ambiguous: the one URL the handle spells exactly (spellsUrl; https before http), else,
 * among those or among all when none does, the one catalogue server, else the one the handle is
 * bound to among them; otherwise nobody (`ambiguous`, so that the caller can say so). A look-alike
 * that spells the handle less exactly never wins however early it came; one that spells it as
 * exactly wins only by holding the handle (it was tracked first) and never over a catalogue server.
 */
export function chooseByHandle<T extends HandleCandidate>(handle: string, candidates: readonly T[]): HandleChoice<T> {
  const registry = candidates.find((c) => c.kind === 'registry');
  if (registry) return { chosen: registry };
  const byId = new Map<number, T>();
  for (const c of candidates) if (!byId.has(c.id) || c.kind !== null) byId.set(c.id, c);
  const all = [...byId.values()].sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
  if (all.length === 0) return null;
  if (all.length === 1) return { chosen: all[0]! };
  // The server the handle is bound to (its own name or slug), when it spells the handle as well
  // as any other: a look-alike reported later that spells it equally (https://alpha-example.mcp
  // beside https://alpha.example/mcp) cannot make an established server's handle answer nobody.
  const holder = (among: readonly T[]) => {
    const bound = among.filter((c) => c.kind !== null);
    return bound.length === 1 ? bound[0]! : null;
  };
  const spellers = all.filter((c) => spellsUrl(handle, c.url));
  const https = spellers.filter((c) => c.url.startsWith('https:'));
  const pool = https.length > 0 ? https : spellers.length > 0 ? spellers : all;
  if (all.length > MAX_HANDLE_CANDIDATES) {
    const held = https.length > 0 ? holder(https) : null;
    return held ? { chosen: held } : { ambiguous: all };
  }
  if (pool.length === 1) return { chosen: pool[0]! };
  const catalogued = pool.filter((c) => c.catalogued);
  if (catalogued.length === 1) return { chosen: catalogued[0]! };
  const held = holder(catalogued.length > 1 ? catalogued : pool);
  if (held) return { chosen: held };
  return { ambiguous: all };
}
