// Agent-readiness rubric (docs/probes.md "Agent-readiness rubric"). Pure: scores what the probes
// saw. Each dimension is 100 points split over checks; every check reports the points it gave
// or withheld and why, and the fix for a withheld check.

/**
 * The documents probed, in order. Documents sharing a `slot` are alternatives for one observation,
 * tried in this order: the next only when the one before was not found. The A2A card is read where
 * A2A 0.3 and 1.x publish it (/.well-known/agent-card.json, the A2A SDKs' AGENT_CARD_PATH), then at
 * the older /.well-known/agent.json; MCP discovery is /.well-known/mcp.json, then the Server Card
 * at /.well-known/mcp/server-card.json. At most 7 documents per probe (5 when the first of each
 * pair is found).
 */
export const SURFACES = [
  { surface: 'robots.txt', path: '/robots.txt', kind: 'text', slot: 'robots' },
  { surface: 'llms.txt', path: '/llms.txt', kind: 'text', slot: 'llms' },
  { surface: 'openapi.json', path: '/openapi.json', kind: 'json', slot: 'openapi' },
  { surface: 'mcp.json', path: '/.well-known/mcp.json', kind: 'json', slot: 'mcp' },
  { surface: 'mcp/server-card.json', path: '/.well-known/mcp/server-card.json', kind: 'server-card', slot: 'mcp' },
  { surface: 'agent-card.json', path: '/.well-known/agent-card.json', kind: 'json', slot: 'agent' },
  { surface: 'agent.json', path: '/.well-known/agent.json', kind: 'json', slot: 'agent' },
] as const;

export type SurfaceName = (typeof SURFACES)[number]['surface'];
export type SurfaceSlot = (typeof SURFACES)[number]['slot'];
export const DIMENSIONS = ['discoverability', 'comprehension', 'usability', 'trustability', 'transactability'] as const;
export type Dimension = (typeof DIMENSIONS)[number];

export interface ReadinessObservation {
  https: boolean;
  robots: string | null;
  llms: string | null;
  openapi: Record<string, unknown> | null;
  /** /.well-known/mcp.json, or the Server Card at /.well-known/mcp/server-card.json when there is no mcp.json. */
  mcp: Record<string, unknown> | null;
  /** The A2A agent card: /.well-known/agent-card.json, or /.well-known/agent.json when there is none there. */
  agent: Record<string, unknown> | null;
  /** Where `mcp` and `agent` were found (their paths); absent reads as the first location. */
  foundAt?: { mcp?: string; agent?: string };
}

export interface RubricResult {
  check: string;
  points: number;
  max_points: number;
  reason: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): v is string => typeof v === 'string' && v.trim() !== '';

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
function operations(o: Obj | null): Obj[] {
  if (!o || !isObj(o.paths)) return [];
  const ops: Obj[] = [];
  for (const item of Object.values(o.paths)) if (isObj(item)) for (const m of HTTP_METHODS) if (isObj(item[m])) ops.push({ ...(item[m] as Obj), __method: m });
  return ops;
}
const share = (ops: Obj[], pred: (op: Obj) => boolean) => (ops.length === 0 ? 0 : ops.filter(pred).length / ops.length);

/** Disallow: / under User-agent: * (the whole site closed to crawlers and agents). */
export function robotsBlocksAll(robots: string): boolean {
  let star = false;
  let inGroup = false;
  for (const raw of robots.split(/\r?\n/)) {
    const line = raw.replace(/#.*/, '').trim();
    const m = /^([A-Za-z-]+)\s*:\s*(.*)$/.exec(line);
    if (!m) continue;
    const key = m[1]!.toLowerCase();
    const value = m[2]!.trim();
    if (key === 'user-agent') {
      if (!inGroup) star = false;
      inGroup = true;
      if (value === '*') star = true;
    } else {
      inGroup = false;
      if (star && key === 'disallow' && value === '/') return true;
    }
  }
  return false;
}

/** The MCP endpoint an mcp.json or a Server Card (`remotes[].url`) names (the first of the usual keys), or null. */
export function mcpEndpoint(mcp: Obj | null): string | null {
  if (!mcp) return null;
  for (const k of ['endpoint', 'url', 'mcp_endpoint', 'mcpEndpoint', 'server_url']) if (str(mcp[k])) return mcp[k] as string;
  for (const k of ['servers', 'endpoints', 'transports', 'remotes']) {
    const list = mcp[k];
    if (Array.isArray(list)) for (const s of list) if (isObj(s)) for (const f of ['url', 'endpoint']) if (str(s[f])) return s[f] as string;
  }
  if (isObj(mcp.transport) && str(mcp.transport.url)) return mcp.transport.url;
  return null;
}

function agentSkills(agent: Obj | null): Obj[] {
  return agent && Array.isArray(agent.skills) ? agent.skills.filter(isObj) : [];
}

/**
 * The URL an A2A agent card says the agent is invoked at, or null: the top-level `url` of an A2A
 * 0.3 card, else the first `supportedInterfaces[].url` of an A2A 1.0 card (which has no top-level
 * url; each interface names its url, protocolBinding and protocolVersion).
 */
export function agentEndpoint(agent: Obj | null | undefined): string | null {
  if (!agent) return null;
  if (str(agent.url)) return agent.url;
  if (Array.isArray(agent.supportedInterfaces)) for (const i of agent.supportedInterfaces) if (isObj(i) && str(i.url)) return i.url;
  return null;
}
const agentInvocable = (agent: Obj | null) => agentEndpoint(agent) !== null && agentSkills(agent).length > 0;

interface Check {
  dimension: Dimension;
  check: string;
  points: number;
  test: (o: ReadinessObservation) => boolean;
  pass: string | ((o: ReadinessObservation) => string);
  fail: string;
}

const C: Check[] = [
  // Discoverability: can an agent find the site's machine-readable surfaces?
  { dimension: 'discoverability', check: 'robots_txt', points: 15, test: (o) => o.robots !== null, pass: 'robots.txt is published', fail: 'no robots.txt: publish one at /robots.txt' },
  { dimension: 'discoverability', check: 'robots_allows_agents', points: 10, test: (o) => o.robots !== null && !robotsBlocksAll(o.robots), pass: 'robots.txt does not close the whole site to all agents', fail: 'robots.txt missing or "Disallow: /" for every user agent: allow agents to read the site' },
  { dimension: 'discoverability', check: 'llms_txt', points: 25, test: (o) => o.llms !== null, pass: 'llms.txt is published', fail: 'no llms.txt: publish a Markdown summary at /llms.txt (llmstxt.org)' },
  { dimension: 'discoverability', check: 'mcp_json', points: 25, test: (o) => o.mcp !== null, pass: (o) => (o.foundAt?.mcp === '/.well-known/mcp/server-card.json' ? '/.well-known/mcp/server-card.json (MCP Server Card) is published' : '/.well-known/mcp.json is published'), fail: 'no /.well-known/mcp.json and no Server Card at /.well-known/mcp/server-card.json: describe the MCP endpoint there' },
  { dimension: 'discoverability', check: 'agent_json', points: 25, test: (o) => o.agent !== null, pass: (o) => `${o.foundAt?.agent ?? '/.well-known/agent-card.json'} (A2A agent card) is published`, fail: 'no A2A agent card at /.well-known/agent-card.json (nor at the older /.well-known/agent.json): publish one at /.well-known/agent-card.json' },
  // Comprehension: can an agent understand what the site offers?
  { dimension: 'comprehension', check: 'llms_title', points: 15, test: (o) => o.llms !== null && /^#\s+\S/m.test(o.llms), pass: 'llms.txt has an H1 title', fail: 'llms.txt missing or without an "# Title" line' },
  { dimension: 'comprehension', check: 'llms_summary', points: 10, test: (o) => o.llms !== null && /^>\s+\S/m.test(o.llms), pass: 'llms.txt has a "> summary" blockquote', fail: 'llms.txt missing or without a "> summary" blockquote' },
  { dimension: 'comprehension', check: 'llms_links', points: 15, test: (o) => o.llms !== null && /\[[^\]]+\]\([^)]+\)/.test(o.llms), pass: 'llms.txt links to further documents', fail: 'llms.txt missing or links to nothing: list the key documents as Markdown links' },
  { dimension: 'comprehension', check: 'openapi_valid', points: 20, test: (o) => operations(o.openapi).length > 0 && (str(o.openapi!.openapi) || str(o.openapi!.swagger)), pass: 'openapi.json is an OpenAPI document with operations', fail: 'no usable /openapi.json (needs "openapi" and at least one operation under "paths")' },
  { dimension: 'comprehension', check: 'openapi_described', points: 20, test: (o) => share(operations(o.openapi), (op) => str(op.summary) || str(op.description)) >= 0.8, pass: 'at least 80% of operations have a summary or description', fail: 'fewer than 80% of OpenAPI operations carry a summary or description' },
  { dimension: 'comprehension', check: 'agent_skills_described', points: 20, test: (o) => { const s = agentSkills(o.agent); return s.length > 0 && s.every((k) => str(k.description)); }, pass: 'every agent-card skill has a description', fail: 'agent card missing, without skills, or with undescribed skills' },
  // Usability: can an agent actually call it?
  { dimension: 'usability', check: 'openapi_operation_ids', points: 20, test: (o) => share(operations(o.openapi), (op) => str(op.operationId)) >= 0.8, pass: 'at least 80% of operations have an operationId', fail: 'OpenAPI missing or fewer than 80% of operations have an operationId' },
  { dimension: 'usability', check: 'openapi_parameters_typed', points: 15, test: (o) => { const ops = operations(o.openapi); return ops.length > 0 && ops.every((op) => !Array.isArray(op.parameters) || op.parameters.every((p) => isObj(p) && (isObj(p.schema) || str(p.$ref)))); }, pass: 'every OpenAPI parameter has a schema', fail: 'OpenAPI missing or parameters without a schema' },
  { dimension: 'usability', check: 'openapi_responses', points: 15, test: (o) => operations(o.openapi).some((op) => isObj(op.responses) && Object.values(op.responses).some((r) => isObj(r) && (isObj(r.content) || str(r.$ref)))), pass: 'OpenAPI documents response bodies', fail: 'OpenAPI missing or no operation documents a response body' },
  { dimension: 'usability', check: 'mcp_endpoint', points: 25, test: (o) => mcpEndpoint(o.mcp) !== null, pass: 'mcp.json or the Server Card names an MCP endpoint', fail: 'mcp.json and Server Card missing or naming no endpoint URL' },
  { dimension: 'usability', check: 'agent_invocable', points: 25, test: (o) => agentInvocable(o.agent), pass: 'agent card names an invocation url (url, or supportedInterfaces[].url in A2A 1.0) and at least one skill', fail: 'agent card missing, without url (A2A 0.3) or supportedInterfaces[].url (A2A 1.0), or without skills' },
  // Trustability: can an agent tell who runs it and rely on it?
  { dimension: 'trustability', check: 'https', points: 20, test: (o) => o.https, pass: 'served over HTTPS', fail: 'served over plain HTTP: serve the site over HTTPS' },
  { dimension: 'trustability', check: 'provider', points: 20, test: (o) => isObj(o.agent?.provider) || isObj((o.openapi?.info as Obj | undefined)?.contact), pass: 'the operator is named (agent-card provider or OpenAPI contact)', fail: 'no agent-card provider and no OpenAPI info.contact: say who operates the service' },
  { dimension: 'trustability', check: 'auth_declared', points: 25, test: (o) => isObj(o.agent?.securitySchemes) || isObj(o.agent?.authentication) || isObj((o.openapi?.components as Obj | undefined)?.securitySchemes), pass: 'authentication is declared (securitySchemes)', fail: 'no security scheme declared in the agent card or OpenAPI components' },
  { dimension: 'trustability', check: 'versioned', points: 20, test: (o) => str((o.openapi?.info as Obj | undefined)?.version) || str(o.agent?.version), pass: 'the interface states its version', fail: 'no version in OpenAPI info or the agent card' },
  { dimension: 'trustability', check: 'terms', points: 15, test: (o) => isObj((o.openapi?.info as Obj | undefined)?.license) || str((o.openapi?.info as Obj | undefined)?.termsOfService) || str(o.agent?.documentationUrl), pass: 'license, terms or documentation URL published', fail: 'no license, termsOfService or documentationUrl' },
  // Transactability: can an agent complete a transaction without a human?
  { dimension: 'transactability', check: 'write_operations', points: 25, test: (o) => operations(o.openapi).some((op) => ['post', 'put', 'patch', 'delete'].includes(op.__method as string)), pass: 'OpenAPI offers write operations', fail: 'OpenAPI missing or read-only: no POST/PUT/PATCH/DELETE operation' },
  { dimension: 'transactability', check: 'machine_credentials', points: 25, test: (o) => isObj((o.openapi?.components as Obj | undefined)?.securitySchemes) || isObj(o.agent?.securitySchemes), pass: 'machine-usable credentials are described', fail: 'no security scheme an agent could obtain credentials for' },
  { dimension: 'transactability', check: 'payment_signal', points: 25, test: (o) => operations(o.openapi).some((op) => isObj(op.responses) && '402' in op.responses) || /x402|payment/i.test(JSON.stringify(o.mcp ?? {}) + JSON.stringify(o.agent ?? {})), pass: 'payment is machine-readable (a documented 402 or x402 metadata)', fail: 'no documented 402 response or x402 payment metadata' },
  { dimension: 'transactability', check: 'agent_protocol', points: 25, test: (o) => mcpEndpoint(o.mcp) !== null || agentInvocable(o.agent), pass: 'an agent protocol endpoint (MCP or A2A) is offered', fail: 'no MCP endpoint and no invocable A2A agent' },
];

export interface ReadinessScores {
  score: number;
  dimensions: Record<Dimension, number>;
  reasons: Record<Dimension, RubricResult[]>;
  recommended_next_action: string;
}

export function scoreReadiness(o: ReadinessObservation): ReadinessScores {
  const dimensions = {} as Record<Dimension, number>;
  const reasons = {} as Record<Dimension, RubricResult[]>;
  for (const d of DIMENSIONS) {
    dimensions[d] = 0;
    reasons[d] = [];
  }
  let best: Check | null = null;
  for (const c of C) {
    const ok = Boolean(c.test(o));
    dimensions[c.dimension] += ok ? c.points : 0;
    reasons[c.dimension].push({ check: c.check, points: ok ? c.points : 0, max_points: c.points, reason: ok ? (typeof c.pass === 'function' ? c.pass(o) : c.pass) : c.fail });
    if (!ok && (best === null || c.points > best.points)) best = c;
  }
  const score = Math.round((DIMENSIONS.reduce((s, d) => s + dimensions[d], 0) / DIMENSIONS.length) * 10) / 10;
  return { score, dimensions, reasons, recommended_next_action: best ? best.fail : 'nothing to improve: every check passed' };
}

/** The rubric itself, for docs and tests: dimension -> checks with their points. */
export function rubric(): { dimension: Dimension; check: string; points: number }[] {
  return C.map(({ dimension, check, points }) => ({ dimension, check, points }));
}
