// Server identity (DECISIONS.md "Servers: identity, tracking, category"): a server is its
// canonical URL; name and slug are derived from it and resolve to it as well.

export class InvalidServerUrl extends Error {}

const MAX_URL_LENGTH = 2048;

/**
 * Canonical form: lower-case scheme and host (URL does that), default port, trailing slash and
 * fragment dropped, query kept. Only http and https; credentials in the URL are refused so
 * that we never store a secret someone pasted.
 */
export function canonicalServerUrl(input: string): string {
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
