// Gateway decisions (DECISIONS.md "Gateway decisions"): which upstream MCP server a gateway is
// asking about, and whether its verdict lets the traffic pass. Pure: no I/O, no clock.

import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';
import type { PreflightVerdict } from './verdict.js';

/** Gate policy (GATE_ALLOW_UNCERTAIN, GATE_ALLOW_UNRATED). FAIL is denied whatever the policy. */
/** Largest ext_authz CheckRequest accepted (RESOURCE_EXHAUSTED beyond it), by the full service and the bundle gate alike. */
export const EXT_AUTHZ_MAX_BYTES = 4 * 1024 * 1024;

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

/**
 * The request headers that can name an upstream. They choose the upstream only when the gateway
 * itself sets them: always on /v1/gate (the contract makes them the gateway's own; the nginx
 * example overwrites any a client sent), and on the gRPC Check only those named in
 * GATE_TRUSTED_HEADERS (Envoy forwards the client's headers there).
 */
export const UPSTREAM_HEADERS = ['x-mcp-server', 'x-original-url', 'x-forwarded-proto', 'x-forwarded-host', 'x-original-uri'] as const;
export type UpstreamHeader = (typeof UPSTREAM_HEADERS)[number];

/**
 * Every header the gate decides on: each carries one value. A repeated one is refused (the
 * upstream headers and Host: 400; Mcp-Method / Mcp-Name: 403 `mcp_headers_invalid`), never read
 * as its first, last or joined value: node joins repeated lines with ", " (and keeps the first
 * Host), Envoy's Check joins them with "," (or lists each in `header_map`), while the server
 * behind the gateway may read the first or the last one, so the gate would judge another request
 * than the one that passes.
 */
export const SINGLE_VALUED_HEADERS = [...UPSTREAM_HEADERS, 'host', 'mcp-method', 'mcp-name'] as const;
export type SingleValuedHeader = (typeof SINGLE_VALUED_HEADERS)[number];
const SINGLE_VALUED: ReadonlySet<string> = new Set(SINGLE_VALUED_HEADERS);

/** Whether a lower-case header name is one the gate decides on (SINGLE_VALUED_HEADERS). */
export const isSingleValued = (name: string): name is SingleValuedHeader => SINGLE_VALUED.has(name);

/** Headers whose values are lists when they hold a comma: never one value (X-Forwarded-*; the MCP names). */
const LIST_IF_COMMA: ReadonlySet<string> = new Set(['x-forwarded-proto', 'x-forwarded-host', 'mcp-method', 'mcp-name']);

/**
 * The single-valued headers whose value, in a map where repeats were joined with a comma (Envoy's
 * Check `headers`), may be two values: any comma in X-Forwarded-Proto / X-Forwarded-Host /
 * Mcp-Method / Mcp-Name (none of which ever holds one), and in the URL headers a comma before the
 * query (`?`) or fragment: a comma in the query cannot change the server a URL names, so only
 * there is it kept as part of the one value. Host is not read from the map (the Check carries the
 * request's host as `host`, which the gate reads).
 */
export function mergedRepeats(headers: Readonly<Record<string, string | undefined>>): SingleValuedHeader[] {
  const out: SingleValuedHeader[] = [];
  for (const name of SINGLE_VALUED_HEADERS) {
    const v = headers[name];
    if (v === undefined || name === 'host') continue;
    const end = LIST_IF_COMMA.has(name) ? v.length : v.search(/[?#]/);
    if (v.slice(0, end === -1 ? v.length : end).includes(',')) out.push(name);
  }
  return out;
}

const FORWARDED_TRIPLE: readonly UpstreamHeader[] = ['x-forwarded-proto', 'x-forwarded-host', 'x-original-uri'];

/** What a gateway told us about the request it is authorizing. Header names are lower-case. */
export interface GateRequestInfo {
  /**
   * Upstream headers the gateway itself asserts, and nothing a client could have written: on
   * /v1/gate all of them; on the gRPC Check only those GATE_TRUSTED_HEADERS names (see
   * `gatewayAssertedHeaders`).
   */
  gatewayHeaders: Readonly<Record<string, string | undefined>>;
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
  /** Which interface asks; only changes the wording of "no upstream". */
  via?: 'http' | 'envoy_grpc';
  /**
   * `mcp-method` and `mcp-name` of the checked request (the client's, as the gateway forwarded
   * them): they choose which tool of the upstream is judged, never the upstream itself.
   */
  mcpHeaders?: Readonly<Record<string, string | undefined>>;
  /**
   * The single-valued headers (SINGLE_VALUED_HEADERS) the checked request or the gate call carried
   * more than once: on HTTP separate lines of one name, on the gRPC Check a name listed twice in
   * `header_map` or a merged value in `headers` (`mergedRepeats`). The value read for them is not
   * trusted to be the one the upstream reads.
   */
  repeated?: readonly string[];
}

/**
 * The headers of a checked request (Envoy's gRPC Check) that the gateway asserts: only the
 * upstream headers configured as gateway-set. Everything else came from the client and never
 * chooses the upstream.
 */
export function gatewayAssertedHeaders(
  headers: Readonly<Record<string, string | undefined>>,
  trusted: readonly UpstreamHeader[],
): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const name of trusted) if (headers[name] !== undefined) out[name] = headers[name];
  return out;
}

/**
 * Parses GATE_TRUSTED_HEADERS: a comma-separated list of upstream header names the gateway sets
 * on the checked request, overwriting any a client sent. Throws Error with a reason.
 */
export function parseTrustedHeaders(raw: string): UpstreamHeader[] {
  const names = raw
    .split(',')
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== '');
  const out: UpstreamHeader[] = [];
  for (const n of names) {
    if (!(UPSTREAM_HEADERS as readonly string[]).includes(n)) {
      throw new Error(`"${n}" is not an upstream header; use a comma-separated list of ${UPSTREAM_HEADERS.join(', ')}`);
    }
    if (!out.includes(n as UpstreamHeader)) out.push(n as UpstreamHeader);
  }
  const triple = FORWARDED_TRIPLE.filter((n) => out.includes(n));
  if (triple.length > 0 && triple.length < FORWARDED_TRIPLE.length) {
    throw new Error(`${FORWARDED_TRIPLE.join(', ')} name one upstream together: list all three or none`);
  }
  return out;
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

const HEADER_LABEL: Record<string, string> = {
  'x-mcp-server': 'X-Mcp-Server',
  'x-original-url': 'X-Original-URL',
  'x-forwarded-proto': 'X-Forwarded-Proto',
  'x-forwarded-host': 'X-Forwarded-Host',
  'x-original-uri': 'X-Original-URI',
  host: 'Host',
};

const sentTwice = (name: string) =>
  `${HEADER_LABEL[name] ?? name} was sent more than once: each header naming the upstream must carry one value (the gateway should set it, replacing the client's)`;

/**
 * One X-Forwarded-Proto / X-Forwarded-Host value. A comma-separated list is refused, not read:
 * its first entry is what the client wrote when a proxy appends, and which entry is the nearest
 * proxy's depends on the chain; the gateway must set a single value.
 */
function single(value: string | undefined, name: string): { ok: true; value: string | undefined } | { ok: false; problem: string } {
  const v = value?.trim();
  if (v === undefined || v === '') return { ok: true, value: undefined };
  if (v.includes(',')) {
    return { ok: false, problem: `${HEADER_LABEL[name]} must hold one value, not a comma-separated list: have the gateway set it, replacing any a client or earlier proxy sent` };
  }
  return { ok: true, value: v };
}

const noRoute = (url: string) =>
  `${url} matches no GATE_ROUTES entry: with a route table only its routes (or X-Mcp-Server / the mcp_server context extension) name an upstream, never a request's own host`;

function noUpstream(info: GateRequestInfo): string {
  if (info.via === 'envoy_grpc') {
    return 'no upstream: set the context extension mcp_server, or check a request with a host and path (mapped through GATE_ROUTES when one matches)';
  }
  return 'no upstream: send X-Mcp-Server (full URL), X-Original-URL, or X-Forwarded-Proto + X-Forwarded-Host + X-Original-URI';
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
 * The upstream MCP server a gateway is asking about, as a canonical URL. Only what the gateway
 * asserts is read (DECISIONS.md "Gateway decisions"). In order:
 * 1. an upstream from the gateway's own configuration (Envoy context extension `mcp_server`);
 * 2. the gateway-set `X-Mcp-Server` (a full URL, used as given, never remapped);
 * 3. the gateway-set `X-Original-URL`; else `X-Forwarded-Proto` + `X-Forwarded-Host` +
 *    `X-Original-URI`; else the checked request's own scheme + host + path. Such a request URL is
 *    mapped through the route table when a route matches; with no route table it is the upstream
 *    itself (query and fragment dropped). With a route table, a request URL no route matches is no
 *    upstream: its host is what the client wrote (Host, or the X-Original-URL /
 *    X-Forwarded-Host a gateway built from it), which the gateway may not route by.
 * None of them, a header read here sent more than once (`info.repeated`), or an X-Forwarded-Proto
 * / X-Forwarded-Host list: not resolvable (the gate answers 400).
 */
export function resolveUpstream(info: GateRequestInfo, routes: readonly GateRoute[] = []): UpstreamResolution {
  const h = info.gatewayHeaders;
  const configured = info.configured?.trim();
  if (configured) {
    const r = canonical(configured, 'mcp_server context extension');
    return r.ok ? { ...r, source: 'context_extension' } : r;
  }
  const repeated = info.repeated ?? [];
  // Any upstream header present and repeated: the gateway did not set it alone.
  for (const name of UPSTREAM_HEADERS) if (h[name] !== undefined && repeated.includes(name)) return { ok: false, problem: sentTwice(name) };
  const explicit = h['x-mcp-server']?.trim();
  if (explicit) return canonical(explicit, 'X-Mcp-Server');

  let requestUrl: string | undefined;
  let source: UpstreamSource;
  let label: string;
  const original = h['x-original-url']?.trim();
  const proto = single(h['x-forwarded-proto'], 'x-forwarded-proto');
  if (!proto.ok) return proto;
  const forwardedHost = single(h['x-forwarded-host'], 'x-forwarded-host');
  if (!forwardedHost.ok) return forwardedHost;
  const fwdProto = proto.value;
  const fwdHost = forwardedHost.value;
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
    if (repeated.includes('host')) return { ok: false, problem: sentTwice('host') };
    if (info.fallback.host.includes(',')) return { ok: false, problem: 'the request host must be one host name, not a comma-separated list' };
    const path = info.fallback.path.startsWith('/') ? info.fallback.path : `/${info.fallback.path}`;
    requestUrl = `${info.fallback.scheme || 'http'}://${info.fallback.host}${path}`;
    source = 'request';
    label = 'the request URL';
  } else {
    return { ok: false, problem: noUpstream(info) };
  }

  const parsed = canonical(requestUrl, label);
  if (!parsed.ok) return parsed;
  const bare = canonicalServerUrl(withoutQuery(parsed.upstream));
  const route = routes.length > 0 ? matchRoute(bare, routes) : null;
  if (route) return { ok: true, upstream: route.upstream, source: 'route', route: true };
  // The bare request URL from Host + the path below /v1/gate is only an upstream through a route:
  // without one, the gateway sent none of the headers the contract names.
  if (source === 'request' && info.fallback?.routeOnly) return { ok: false, problem: `${noUpstream(info)}, or configure GATE_ROUTES` };
  // With a route table the operator listed the hosts it serves; any other host was the client's choice.
  if (routes.length > 0) return { ok: false, problem: noRoute(bare) };
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
