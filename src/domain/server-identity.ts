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
 * that we never store a secret someone pasted.
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
  let path = u.pathname.replace(/\/+$/, '');
  if (path === '/') path = '';
  return `${u.protocol}//${u.host}${path}${u.search}`;
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
