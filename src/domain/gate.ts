// Gateway decisions (DECISIONS.md "Gateway decisions"): which upstream MCP server a gateway is
// asking about, and whether its verdict lets the traffic pass. Pure: no I/O, no clock.

import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';
import type { PreflightVerdict } from './verdict.js';

/** Gate policy (GATE_ALLOW_UNCERTAIN, GATE_ALLOW_UNRATED). FAIL is denied whatever the policy. */
export interface GatePolicy {
  allowUncertain: boolean;
  allowUnrated: boolean;
}

/** One GATE_ROUTES entry: requests for `host` under `pathPrefix` are about `upstream`. */
export interface GateRoute {
  /** Lower-case host, with port when not the default; `*` matches any host. */
  host: string;
  /** Path prefix matched on whole segments ("/weather" matches "/weather" and "/weather/x", not "/weatherx"). */
  pathPrefix: string;
  /** Canonical URL of the upstream MCP server. */
  upstream: string;
}

export interface GateDecision {
  allow: boolean;
  /** Short machine-readable reason: verdict_pass, verdict_fail, policy_allows_uncertain, ... */
  reason: string;
}

/** The decision for a verdict under a policy. */
export function decideGate(verdict: PreflightVerdict, policy: GatePolicy): GateDecision {
  switch (verdict) {
    case 'PASS':
      return { allow: true, reason: 'verdict_pass' };
    case 'FAIL':
      return { allow: false, reason: 'verdict_fail' };
    case 'UNCERTAIN':
      return policy.allowUncertain ? { allow: true, reason: 'policy_allows_uncertain' } : { allow: false, reason: 'policy_denies_uncertain' };
    case 'UNRATED':
      return policy.allowUnrated ? { allow: true, reason: 'policy_allows_unrated' } : { allow: false, reason: 'policy_denies_unrated' };
  }
}

/** What a gateway told us about the request it is authorizing. Header names are lower-case. */
export interface GateRequestInfo {
  headers: Readonly<Record<string, string | undefined>>;
  /**
   * The original request as the caller knows it without gateway headers: Envoy's gRPC check
   * carries scheme, host and path; on /v1/gate/* the path below /v1/gate and the Host header.
   */
  fallback?: {
    scheme?: string;
    host?: string;
    path?: string;
    /**
     * True when this URL may only be mapped through GATE_ROUTES (the Host header and path of an
     * HTTP gate call: the contract names no header there); false when it is the original
     * request itself (Envoy's gRPC check attributes).
     */
    routeOnly: boolean;
  };
  /** An upstream named by configuration of the caller (Envoy context extension `mcp_server`). */
  configured?: string;
}

export type UpstreamSource = 'x-mcp-server' | 'context_extension' | 'x-original-url' | 'x-forwarded' | 'request' | 'route';

export type UpstreamResolution =
  | { ok: true; upstream: string; source: UpstreamSource; route: boolean }
  | { ok: false; problem: string };

/** Most characters accepted in any one upstream header; longer is a 400, not a lookup. */
export const MAX_GATE_HEADER_LENGTH = 2048;

function canonical(raw: string, label: string): UpstreamResolution {
  if (raw.length > MAX_GATE_HEADER_LENGTH) return { ok: false, problem: `${label} is longer than ${MAX_GATE_HEADER_LENGTH} characters` };
  try {
    return { ok: true, upstream: canonicalServerUrl(raw), source: 'x-mcp-server', route: false };
  } catch (err) {
    if (err instanceof InvalidServerUrl) return { ok: false, problem: `${label}: ${err.message}` };
    throw err;
  }
}

/** Drops query and fragment: they belong to one request, not to the server being called. */
function withoutQuery(url: string): string {
  const u = new URL(url);
  u.search = '';
  u.hash = '';
  return u.toString();
}

function first(value: string | undefined): string | undefined {
  // Proxies may append to X-Forwarded-* lists; the first entry is the client-facing one.
  const v = value?.split(',')[0]?.trim();
  return v === undefined || v === '' ? undefined : v;
}

/** Whole-segment prefix match. */
function underPrefix(path: string, prefix: string): boolean {
  if (prefix === '/' || prefix === '') return true;
  return path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`);
}

/** The most specific route (exact host before `*`, then longest prefix) for a request URL. */
export function matchRoute(requestUrl: string, routes: readonly GateRoute[]): GateRoute | null {
  const u = new URL(requestUrl);
  const host = u.host.toLowerCase();
  let best: GateRoute | null = null;
  for (const r of routes) {
    if (r.host !== '*' && r.host !== host) continue;
    if (!underPrefix(u.pathname, r.pathPrefix)) continue;
    if (
      best === null ||
      (best.host === '*' && r.host !== '*') ||
      ((best.host === '*') === (r.host === '*') && r.pathPrefix.length > best.pathPrefix.length)
    ) {
      best = r;
    }
  }
  return best;
}

/**
 * The upstream MCP server a gateway is asking about, as a canonical URL. In order:
 * 1. an upstream from the gateway's own configuration (Envoy context extension `mcp_server`),
 *    which a client cannot forge, unlike request headers;
 * 2. `X-Mcp-Server` (a full URL, used as given, never remapped);
 * 3. `X-Original-URL`; else `X-Forwarded-Proto` + `X-Forwarded-Host` + `X-Original-URI`; else the
 *    fallback scheme + host + path. Such a request URL is mapped through the route table when a
 *    route matches, otherwise it is the upstream itself (query and fragment dropped).
 * None of them: not resolvable (the HTTP gate answers 400).
 */
export function resolveUpstream(info: GateRequestInfo, routes: readonly GateRoute[] = []): UpstreamResolution {
  const h = info.headers;
  const configured = info.configured?.trim();
  if (configured) {
    const r = canonical(configured, 'mcp_server context extension');
    return r.ok ? { ...r, source: 'context_extension' } : r;
  }
  const explicit = h['x-mcp-server']?.trim();
  if (explicit) return canonical(explicit, 'X-Mcp-Server');

  let requestUrl: string | undefined;
  let source: UpstreamSource;
  let label: string;
  const original = h['x-original-url']?.trim();
  const fwdProto = first(h['x-forwarded-proto']);
  const fwdHost = first(h['x-forwarded-host']);
  const originalUri = h['x-original-uri']?.trim();
  if (original) {
    requestUrl = original;
    source = 'x-original-url';
    label = 'X-Original-URL';
  } else if (fwdProto && fwdHost && originalUri) {
    if (!originalUri.startsWith('/')) return { ok: false, problem: 'X-Original-URI must start with /' };
    requestUrl = `${fwdProto}://${fwdHost}${originalUri}`;
    source = 'x-forwarded';
    label = 'X-Forwarded-Proto + X-Forwarded-Host + X-Original-URI';
  } else if (info.fallback?.host && info.fallback.path !== undefined) {
    const path = info.fallback.path.startsWith('/') ? info.fallback.path : `/${info.fallback.path}`;
    requestUrl = `${info.fallback.scheme || 'http'}://${info.fallback.host}${path}`;
    source = 'request';
    label = 'the request URL';
  } else {
    return {
      ok: false,
      problem: 'no upstream: send X-Mcp-Server (full URL), X-Original-URL, or X-Forwarded-Proto + X-Forwarded-Host + X-Original-URI',
    };
  }

  const parsed = canonical(requestUrl, label);
  if (!parsed.ok) return parsed;
  const bare = canonicalServerUrl(withoutQuery(parsed.upstream));
  const route = routes.length > 0 ? matchRoute(bare, routes) : null;
  if (route) return { ok: true, upstream: route.upstream, source: 'route', route: true };
  // The bare request URL from Host + the path below /v1/gate is only an upstream through a route:
  // without one, the gateway sent none of the headers the contract names.
  if (source === 'request' && info.fallback?.routeOnly) {
    return {
      ok: false,
      problem: 'no upstream: send X-Mcp-Server (full URL), X-Original-URL, or X-Forwarded-Proto + X-Forwarded-Host + X-Original-URI, or configure GATE_ROUTES',
    };
  }
  return { ok: true, upstream: bare, source, route: false };
}

/** Parses GATE_ROUTES (a JSON array of {host, path_prefix, upstream}); throws Error with a reason. */
export function parseGateRoutes(raw: string): GateRoute[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new Error('must be a JSON array of {"host", "path_prefix", "upstream"}');
  }
  if (!Array.isArray(parsed)) throw new Error('must be a JSON array of {"host", "path_prefix", "upstream"}');
  return parsed.map((item: unknown, i) => {
    if (typeof item !== 'object' || item === null) throw new Error(`entry ${i} must be an object`);
    const { host, path_prefix, upstream } = item as Record<string, unknown>;
    if (typeof host !== 'string' || !/^(\*|[a-z0-9.-]+(:\d{1,5})?|\[[0-9a-f:.]+\](:\d{1,5})?)$/i.test(host)) {
      throw new Error(`entry ${i}: host must be a host name (optionally with :port) or "*"`);
    }
    const prefix = path_prefix === undefined ? '/' : path_prefix;
    if (typeof prefix !== 'string' || !prefix.startsWith('/')) throw new Error(`entry ${i}: path_prefix must start with /`);
    if (typeof upstream !== 'string') throw new Error(`entry ${i}: upstream must be a URL`);
    let url: string;
    try {
      url = canonicalServerUrl(upstream);
    } catch (err) {
      throw new Error(`entry ${i}: upstream ${(err as Error).message}`);
    }
    return { host: host.toLowerCase(), pathPrefix: prefix.length > 1 ? prefix.replace(/\/+$/, '') : prefix, upstream: url };
  });
}
