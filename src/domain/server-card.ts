import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';
import { cutAt } from './text-diff.js';

// MCP Server Cards (SEP-2127, the draft in the experimental-ext-server-card project; docs/probes.md
// "Server Cards"). A card is what a server claims about itself before anyone connects: identity,
// endpoints and transports, protocol versions, and (in earlier drafts and many cards in the wild)
// its tools. A card is a claim, never evidence: this module compares claims with what the server
// said at runtime and says what differs. No score reads the result. Pure: no I/O.

export const SERVER_CARD_MEDIA_TYPE = 'application/mcp-server-card+json';
export const SERVER_CARD_SCHEMA = 'https://static.modelcontextprotocol.io/schemas/v2/server-card.schema.json';
/** The anomaly flag a card that contradicts runtime raises (no score effect; DRIFT-like window). */
export const SERVER_CARD_FLAG = 'server_card_mismatch';
/** The first protocol revision of the stateless era: server/discover instead of initialize. */
export const FIRST_MODERN_PROTOCOL_VERSION = '2026-07-28';

export interface CardRemote {
  type: string | null;
  url: string;
  supportedProtocolVersions: string[] | null;
}

/** What a card claims, read from the current draft and the earlier shapes still served. */
export interface CardClaims {
  name: string | null;
  version: string | null;
  title: string | null;
  remotes: CardRemote[];
  /** Top-level protocol versions of earlier drafts (`protocolVersion`, `supportedProtocolVersions`). */
  protocolVersions: string[] | null;
  /** Tool names when the card lists tools (earlier drafts; `tools` or `capabilities.tools`); null when it does not. */
  tools: string[] | null;
}

/** What the server said at runtime, as the probe saw it. */
export interface RuntimeFacts {
  url: string;
  transport: 'streamable-http' | 'sse';
  protocol_version: string;
  era: 'modern' | 'legacy';
  server_info: { name: string; version: string; title: string | null } | null;
  /** Revisions server/discover advertised (modern servers); null after initialize. */
  supported_versions: string[] | null;
  /** Tool names tools/list returned; null when they were not read. */
  tools: string[] | null;
}

export type CardField = 'name' | 'version' | 'title' | 'endpoint' | 'transport' | 'protocol_versions' | 'tools';

export interface CardDifference {
  field: CardField;
  claimed: string;
  observed: string;
  /** One sentence for people: what the card says against what the server did. */
  detail: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown, max = 2048): string | null => (typeof v === 'string' && v.trim() !== '' && v.length <= max ? v.trim() : null);
const strList = (v: unknown): string[] | null => {
  if (!Array.isArray(v)) return null;
  const out = v.map((x) => str(x, 64)).filter((x): x is string => x !== null);
  return out.length > 0 ? [...new Set(out)].slice(0, 32) : null;
};
const MAX_LISTED = 1000;

/**
 * Reads a card document. Null when it is not a card at all (no identity, no remote, no tools);
 * unknown members are ignored, wrong types read as absent.
 */
export function parseServerCard(doc: unknown): CardClaims | null {
  if (!isObj(doc)) return null;
  // SEP-1649 cards carried identity in serverInfo (and `version` was the card format's version).
  const info = isObj(doc.serverInfo) ? doc.serverInfo : null;
  const name = str(info?.name, 200) ?? str(doc.name, 200);
  const version = info ? str(info.version, 255) : str(doc.version, 255);
  const title = str(info?.title, 200) ?? str(doc.title, 200);

  const remotes: CardRemote[] = [];
  const addRemote = (r: unknown) => {
    if (!isObj(r) || remotes.length >= 16) return;
    const url = str(r.url) ?? str(r.endpoint);
    if (!url) return;
    remotes.push({ type: str(r.type, 64), url, supportedProtocolVersions: strList(r.supportedProtocolVersions) });
  };
  if (Array.isArray(doc.remotes)) doc.remotes.forEach(addRemote);
  else if (isObj(doc.transport)) addRemote(doc.transport);

  const protocolVersions = strList(doc.supportedProtocolVersions) ?? (str(doc.protocolVersion, 64) ? [str(doc.protocolVersion, 64)!] : null);

  const toolList = Array.isArray(doc.tools) ? doc.tools : isObj(doc.capabilities) && Array.isArray(doc.capabilities.tools) ? doc.capabilities.tools : null;
  let tools: string[] | null = null;
  if (toolList) {
    tools = [...new Set(toolList.slice(0, MAX_LISTED).map((t) => (typeof t === 'string' ? str(t, 200) : isObj(t) ? str(t.name, 200) : null)).filter((n): n is string => n !== null))];
  }

  if (name === null && version === null && remotes.length === 0 && tools === null) return null;
  return { name, version, title, remotes, protocolVersions, tools };
}

function sameUrl(a: string, b: string): boolean {
  try {
    return canonicalServerUrl(a) === canonicalServerUrl(b);
  } catch (err) {
    if (err instanceof InvalidServerUrl) return false;
    throw err;
  }
}

/** The card's remote for `url`, if it lists one (templated URLs never match). */
export function remoteFor(card: CardClaims, url: string): CardRemote | null {
  return card.remotes.find((r) => !r.url.includes('{') && sameUrl(r.url, url)) ?? null;
}

/**
 * Whether a card found at `location` describes the server at `url`: a card at the reserved
 * location `<url>/server-card` always does; one found through the catalog or a well-known path
 * only when it lists `url` among its remotes (a domain may host several servers).
 */
export function cardDescribes(card: CardClaims, url: string, location: 'reserved' | 'catalog' | 'well-known'): boolean {
  return location === 'reserved' || remoteFor(card, url) !== null;
}

/** Names in a difference's text: at most LISTED_IN_TEXT, each cut at 200 characters (the rest counted). */
const LISTED_IN_TEXT = 20;
const list = (xs: readonly string[]) => {
  if (xs.length === 0) return 'none';
  const shown = xs.slice(0, LISTED_IN_TEXT).map((x) => (x.length > 200 ? `${cutAt(x, 200)}…` : x));
  return xs.length > LISTED_IN_TEXT ? `${shown.join(', ')} and ${xs.length - LISTED_IN_TEXT} more` : shown.join(', ');
};
const isModern = (v: string) => v >= FIRST_MODERN_PROTOCOL_VERSION;

/** Same name: equal, or the card's reverse-DNS name ends in the runtime name ("com.example/weather" and "weather"). */
function sameName(claimed: string, observed: string): boolean {
  const c = claimed.toLowerCase();
  const o = observed.toLowerCase();
  return c === o || c.slice(c.lastIndexOf('/') + 1) === o;
}

/** Every claim of `card` that contradicts `rt`, in a fixed order; [] when the card matches. */
export function compareServerCard(card: CardClaims, rt: RuntimeFacts): CardDifference[] {
  const out: CardDifference[] = [];
  const info = rt.server_info;
  if (card.name !== null && info && !sameName(card.name, info.name)) {
    out.push({ field: 'name', claimed: card.name, observed: info.name, detail: `the card names the server "${card.name}", the server calls itself "${info.name}"` });
  }
  if (card.version !== null && info && card.version !== info.version) {
    out.push({ field: 'version', claimed: card.version, observed: info.version, detail: `the card says version ${card.version}, the server reports ${info.version}` });
  }
  if (card.title !== null && info?.title && card.title !== info.title) {
    out.push({ field: 'title', claimed: card.title, observed: info.title, detail: `the card's title is "${card.title}", the server's is "${info.title}"` });
  }

  const remote = remoteFor(card, rt.url);
  if (card.remotes.length > 0 && remote === null) {
    const urls = card.remotes.map((r) => r.url);
    out.push({ field: 'endpoint', claimed: list(urls), observed: rt.url, detail: `the card lists ${list(urls)} as endpoints, not ${rt.url} where the server answers` });
  }
  if (remote?.type && remote.type !== rt.transport) {
    out.push({ field: 'transport', claimed: remote.type, observed: rt.transport, detail: `the card says ${rt.url} speaks ${remote.type}, the server answered over ${rt.transport}` });
  }

  const claimedVersions = remote?.supportedProtocolVersions ?? card.protocolVersions;
  if (claimedVersions) {
    const problems: string[] = [];
    if (!claimedVersions.includes(rt.protocol_version)) problems.push(`the server spoke ${rt.protocol_version}, which the card does not list`);
    const claimedModern = claimedVersions.filter(isModern);
    if (rt.era === 'modern' && rt.supported_versions) {
      const missing = claimedModern.filter((v) => !rt.supported_versions!.includes(v));
      if (missing.length > 0) problems.push(`server/discover does not offer ${list(missing)}`);
    } else if (rt.era === 'legacy' && claimedModern.length > 0) {
      problems.push(`the card claims ${list(claimedModern)} but the server does not answer server/discover`);
    }
    if (problems.length > 0) {
      const observed = rt.era === 'modern' && rt.supported_versions ? list(rt.supported_versions) : rt.protocol_version;
      out.push({ field: 'protocol_versions', claimed: list(claimedVersions), observed, detail: `the card claims ${list(claimedVersions)}: ${problems.join('; ')}` });
    }
  }

  if (card.tools && rt.tools) {
    const live = new Set(rt.tools);
    const claimed = new Set(card.tools);
    const phantom = card.tools.filter((t) => !live.has(t)).sort();
    const unlisted = rt.tools.filter((t) => !claimed.has(t)).sort();
    if (phantom.length > 0) {
      out.push({ field: 'tools', claimed: list(phantom), observed: 'not in tools/list', detail: `the card lists ${list(phantom)}, which the server does not have` });
    }
    if (unlisted.length > 0) {
      out.push({ field: 'tools', claimed: 'not listed', observed: list(unlisted), detail: `the server has ${list(unlisted)}, which the card does not list` });
    }
  }
  return out;
}

/** `<mcp-url>/server-card`: the location SEP-2127 reserves for a server's card. */
export function reservedCardUrl(mcpUrl: string): string {
  const u = new URL(mcpUrl);
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/server-card`;
  u.search = '';
  u.hash = '';
  return u.href;
}

/**
 * A reverse-DNS card name for a host: "observatory.example.com" -> "com.example.observatory/<name>";
 * an IP address (a development setup) has no DNS name to reverse: "local/<name>".
 */
export function reverseDnsName(host: string, name: string): string {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  const ip = h.includes(':') || /^\d{1,3}(\.\d{1,3}){3}$/.test(h);
  const ns = ip ? 'local' : h.split('.').filter(Boolean).reverse().join('.').replace(/[^a-z0-9.-]/g, '-') || 'local';
  return `${ns}/${name.replace(/[^a-zA-Z0-9._-]/g, '-')}`;
}

export interface OwnCardInput {
  publicBaseUrl: string;
  name: string;
  title: string;
  version: string;
  description: string;
  protocolVersions: readonly string[];
  repositoryUrl?: string;
}

/** Our own Server Card (the current SEP-2127 draft shape), consistent with what /mcp answers. */
export function buildServerCard(i: OwnCardInput) {
  const host = new URL(i.publicBaseUrl).hostname;
  return {
    $schema: SERVER_CARD_SCHEMA,
    name: reverseDnsName(host, i.name),
    version: i.version,
    description: i.description.slice(0, 100),
    title: i.title,
    websiteUrl: i.publicBaseUrl,
    remotes: [{ type: 'streamable-http', url: `${i.publicBaseUrl}/mcp`, supportedProtocolVersions: [...i.protocolVersions] }],
  };
}

/** The MCP Catalog (/.well-known/mcp/catalog.json) listing one card. */
export function buildCatalog(i: { publicBaseUrl: string; cardName: string; displayName: string }) {
  const host = new URL(i.publicBaseUrl).hostname;
  return {
    specVersion: 'draft',
    entries: [{ identifier: `urn:air:${host}:${i.cardName.slice(i.cardName.lastIndexOf('/') + 1)}`, displayName: i.displayName, type: SERVER_CARD_MEDIA_TYPE, url: `${i.publicBaseUrl}/mcp/server-card` }],
  };
}
