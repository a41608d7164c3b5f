import type { Queryable } from '../db/index.js';
import { canonicalServerUrl, InvalidServerUrl } from '../domain/server-identity.js';
import { serverHostStore, type ServerAtOrigin } from '../store/server-hosts.js';
import { serverStore } from '../store/servers.js';
import { BoundedMap } from '../store/cache-limits.js';

// Which MCP server an OTLP call went to (docs/telemetry.md "The server"), from what the spans or
// points carry, best first: a URL (`url.full` of the HTTP child span, or of the MCP span), else
// `server.address` + `server.port`: the one server tracked at that origin, or among several the
// one that is established there; none tracked: the origin itself.

/** How long a resolution by address is reused; a new server at that address shows up after it. */
const ADDRESS_TTL_MS = 60_000;
/** Servers read at one origin; more than this and an address names none of them. */
const MAX_SERVERS_AT_ORIGIN = 64;

/**
 * Which of several tracked servers at one origin a span that names only the address is about
 * (docs/telemetry.md): the one server there that is established, i.e. listed by a catalogue or
 * with evidence from more than one independent source family; null when none or several are.
 * The bare origin gets no preference for being tracked: anyone can create it with one report.
 */
export function establishedAtOrigin(servers: readonly ServerAtOrigin[]): string | null {
  const established = servers.filter((s) => s.catalogued || s.families > 1);
  return established.length === 1 ? established[0]!.url : null;
}

export interface ServerHints {
  url: string | null;
  serverAddress: string | null;
  serverPort: number | null;
}

const HOSTNAME = /^[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*\.?$/;
const IPV6 = /^[0-9a-f:.]+$/;

/** `server.address` as the host of a URL (lower case, IPv6 in brackets), or null if it is not a host name or address. */
export function hostOf(address: string): string | null {
  const a = address.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (a.length === 0 || a.length > 253) return null;
  if (a.includes(':')) return IPV6.test(a) ? `[${a}]` : null;
  return HOSTNAME.test(a) ? a.replace(/\.$/, '') : null;
}

/**
 * A URL as a server: http(s) only, credentials and fragment dropped; the query is dropped too
 * (OpenTelemetry's `url.full` may carry tokens in it) unless the URL with its query is already a
 * tracked server. Null when it is not a usable URL.
 */
export function urlForms(raw: string): { withQuery: string | null; bare: string } | null {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  u.username = '';
  u.password = '';
  u.hash = '';
  try {
    const withQuery = u.search ? canonicalServerUrl(u.toString()) : null;
    u.search = '';
    return { withQuery, bare: canonicalServerUrl(u.toString()) };
  } catch (err) {
    if (err instanceof InvalidServerUrl) return null;
    throw err;
  }
}

export function serverResolver(db: Queryable, now: () => number = () => performance.now()) {
  const hosts = serverHostStore(db);
  const servers = serverStore(db);
  const byAddress = new BoundedMap<string, { url: string | null; at: number }>();
  const trackedWithQuery = new BoundedMap<string, { tracked: boolean; at: number }>();

  function remember<V extends { at: number }>(map: Map<string, V>, key: string, value: V): void {
    map.set(key, value);
  }

  async function fromUrl(raw: string): Promise<string | null> {
    const forms = urlForms(raw);
    if (!forms) return null;
    if (forms.withQuery === null) return forms.bare;
    const hit = trackedWithQuery.get(forms.withQuery);
    let tracked = hit !== undefined && now() - hit.at < ADDRESS_TTL_MS ? hit.tracked : undefined;
    if (tracked === undefined) {
      tracked = (await servers.byUrl(forms.withQuery)) !== null;
      remember(trackedWithQuery, forms.withQuery, { tracked, at: now() });
    }
    return tracked ? forms.withQuery : forms.bare;
  }

  async function fromAddress(address: string, port: number | null): Promise<string | null> {
    const host = hostOf(address);
    if (host === null) return null;
    const key = `${host} ${port ?? ''}`;
    const hit = byAddress.get(key);
    if (hit && now() - hit.at < ADDRESS_TTL_MS) return hit.url;
    const https = port === null || port === 443 ? `https://${host}` : `https://${host}:${port}`;
    const http = port === null || port === 80 ? `http://${host}` : `http://${host}:${port}`;
    const found = await hosts.atOrigins([https, http], MAX_SERVERS_AT_ORIGIN + 1);
    let url: string | null;
    if (found.length === 0) url = port === 80 ? http : https; // none tracked: the origin, on the scheme its port implies
    else if (found.length === 1) url = found[0]!.url;
    else if (found.length > MAX_SERVERS_AT_ORIGIN) url = null;
    else url = establishedAtOrigin(found); // several: the one established there, else it cannot say which
    remember(byAddress, key, { url, at: now() });
    return url;
  }

  return {
    /** The canonical server URL the hints name, or null when they name none (or several). */
    async resolve(h: ServerHints): Promise<string | null> {
      if (h.url !== null) {
        const url = await fromUrl(h.url);
        if (url !== null) return url;
      }
      if (h.serverAddress !== null) return fromAddress(h.serverAddress, h.serverPort);
      return null;
    },
  };
}

export type ServerResolver = ReturnType<typeof serverResolver>;
