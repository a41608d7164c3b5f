// The REST paths whose answer is not a plain proto message, in one place. Every other REST path of
// the API is the google.api.http annotation of an RPC in proto/ (read by src/http/openapi.ts).
// Each entry is the OpenAPI fragment of a hand-written adapter; the OpenAPI generator reads this
// list, and test/openapi-contract.test.ts checks it against fastify's route table and the answers.

export type Schema = Record<string, unknown>;
export type Param = { name: string; in: 'query' | 'path' | 'header'; required?: boolean; description: string; schema: Schema };

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const okJson = (description: string, schema: Schema = ref('Json')) => ({ description, content: { 'application/json': { schema } } });
const q = (name: string, description: string, schema: Schema, required = false): Param => ({ name, in: 'query', required, description, schema });
const RATE_LIMITED_PROBES = 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry';

/** A hand-written adapter: a path the contract cannot state as one RPC answering a plain message. */
export interface AdapterOp {
  method: 'get' | 'post';
  path: string;
  id: string;
  tag: string;
  summary: string;
  /** Why the path is hand-written rather than an annotated RPC. */
  why: string;
  params?: Param[];
  body?: Schema;
  /** The 200 response (content and schema). */
  ok: Record<string, unknown>;
  errors?: Record<number, string>;
  /** Further fastify routes ("METHOD /pattern", * for any method) this one entry documents. */
  alsoServes?: string[];
}

const doc = (path: string, id: string, summary: string, type = 'application/json'): AdapterOp => ({
  method: 'get',
  path,
  id,
  tag: 'discovery',
  summary,
  why: 'well-known or discovery document, not an RPC answer',
  ok: { description: summary, content: { [type]: { schema: type.endsWith('json') ? ref('Json') : { type: 'string' } } } },
});

export const REST_ADAPTERS: readonly AdapterOp[] = [
  {
    method: 'get',
    path: '/api/badge',
    id: 'getBadge',
    tag: 'trust',
    summary: 'Trust badge',
    why: 'TrustService.GetBadge answers SVG markup, served as image/svg+xml rather than a JSON message',
    params: [q('url', 'MCP server URL', { type: 'string', format: 'uri' }, true)],
    ok: { description: 'SVG badge', content: { 'image/svg+xml': { schema: { type: 'string' } } } },
    errors: { 400: 'url missing, invalid or refused', 502: 'the server could not be read', 504: 'the server did not answer in time' },
  },
  {
    method: 'get',
    path: '/v1/gate',
    id: 'gate',
    tag: 'trust',
    summary:
      'Gateway decision for nginx auth_request / Envoy ext_authz (any method, and every path below /v1/gate): 200 allow or 403 deny, both with X-Trust-Verdict, X-Trust-Score, X-Trust-Receipt and a signed gateway receipt (docs/gateway.md); a gate answering from a bundle (GATE_BUNDLE_URL) sends X-Trust-Bundle and X-Trust-Bundle-Age instead of a receipt (docs/bundles.md)',
    why: 'any method and any sub-path; the request is described by gateway headers, not a message',
    alsoServes: ['* /v1/gate', '* /v1/gate/*'],
    params: [
      { name: 'X-Mcp-Server', in: 'header', description: 'upstream MCP server (full URL); first choice', schema: { type: 'string', format: 'uri' } },
      { name: 'X-Original-URL', in: 'header', description: 'the original request URL; used when X-Mcp-Server is absent', schema: { type: 'string', format: 'uri' } },
      { name: 'X-Forwarded-Proto', in: 'header', description: 'with X-Forwarded-Host and X-Original-URI, the original request URL', schema: { type: 'string' } },
      { name: 'X-Forwarded-Host', in: 'header', description: 'see X-Forwarded-Proto', schema: { type: 'string' } },
      { name: 'X-Original-URI', in: 'header', description: 'see X-Forwarded-Proto', schema: { type: 'string' } },
      { name: 'Mcp-Method', in: 'header', description: "the checked request's JSON-RPC method (MCP 2026-07-28 clients send it on every request)", schema: { type: 'string' } },
      { name: 'Mcp-Name', in: 'header', description: 'with Mcp-Method: tools/call, the tool called (plain ASCII or =?base64?...?=): the decision is then per tool (tool_drift, tool_verdict_fail, policy_denies_tool)', schema: { type: 'string' } },
    ],
    ok: okJson('allow: allow, decision, reason, upstream, verdict, trust_score, receipt_id, receipt_url, mcp_method, tool_name, tool'),
    errors: {
      400: 'no upstream can be worked out from the headers (or GATE_ROUTES)',
      403: 'deny: the same decision members in a problem body',
      429: 'rate limited (RATE_LIMIT_GATE_PER_MINUTE per client address): Retry-After says when to retry',
    },
  },
  {
    method: 'get',
    path: '/v1/bundle',
    id: 'getBundle',
    tag: 'trust',
    summary:
      "Signed offline bundle of every tracked server's verdict (observatory-bundle-v1, a compact Ed25519 JWS with iat and exp; gzip or br by Accept-Encoding; ETag and If-None-Match 304; docs/bundles.md, schema docs/schemas/bundle.schema.json)",
    why: 'a signed document (JWS with its JWKS), compressed and cached by ETag, not an RPC answer',
    params: [
      q('category', 'only servers of this category', { type: 'string' }),
      q('verdict', 'comma-separated verdicts to keep (PASS, UNCERTAIN, FAIL, UNRATED)', { type: 'string' }),
      q('since', 'bundle_id of an earlier bundle of the same filters: answer a signed delta', { type: 'string', pattern: '^[0-9a-f]{16}$' }),
    ],
    ok: okJson('format, bundle_id, issuer, issued_at, expires_at, server_count, delta, jws, jwks'),
    errors: {
      400: 'unknown category or verdict, malformed since, or since of other filters',
      404: 'since names a bundle no longer kept',
      429: 'rate limited (RATE_LIMIT_BUNDLE_PER_MINUTE per client address): Retry-After says when to retry',
    },
  },
  {
    method: 'get',
    path: '/a2a',
    id: 'getA2aDescriptor',
    tag: 'agents',
    summary: 'A2A JSON-RPC descriptor: methods, skills, usage example',
    why: 'A2A protocol door (JSON-RPC), not an RPC of proto/',
    ok: okJson('descriptor'),
  },
  {
    method: 'post',
    path: '/a2a',
    id: 'a2a',
    tag: 'agents',
    summary:
      'A2A 1.0 and 0.3 over JSON-RPC 2.0 (A2A-Version header: 1.0 for SendMessage, GetTask, ListTasks, CancelTask, ...; none or 0.3 for message/send, tasks/get, ...). Streaming methods answer text/event-stream; errors are JSON-RPC errors with HTTP 200',
    why: 'A2A protocol door (JSON-RPC), not an RPC of proto/',
    body: { oneOf: [{ type: 'object' }, { type: 'array' }] },
    ok: okJson('JSON-RPC response (or an array for a batch)', { oneOf: [ref('JsonRpcResponse'), { type: 'array', items: ref('JsonRpcResponse') }] }),
    errors: { 413: 'body too large', 415: 'not JSON' },
  },
  {
    method: 'get',
    path: '/mcp',
    id: 'getMcpDiscovery',
    tag: 'agents',
    summary: 'MCP discovery document (without Accept: text/event-stream)',
    why: 'MCP protocol door, not an RPC of proto/',
    ok: okJson('server info and tools'),
  },
  {
    method: 'post',
    path: '/mcp',
    id: 'mcp',
    tag: 'agents',
    summary:
      'MCP Streamable HTTP (stateless): 2026-07-28 (server/discover, no initialize) and 2025-11-25 back to 2024-11-05 (initialize); tools preflight_check, check_trust, verify_attestation',
    why: 'MCP protocol door (JSON-RPC), not an RPC of proto/',
    body: { type: 'object' },
    ok: okJson('JSON-RPC response', ref('JsonRpcResponse')),
    errors: { 413: 'body too large', 415: 'not JSON' },
  },
  doc('/.well-known/jwks.json', 'getJwks', 'Public Ed25519 keys (JWK Set) that verify every receipt'),
  doc('/.well-known/agent-card.json', 'getAgentCard', 'A2A agent card (a signed 1.0 card that 0.3 clients read too)'),
  doc('/.well-known/agent.json', 'getAgentJson', 'A2A agent card (legacy location)'),
  doc('/.well-known/did.json', 'getDidDocument', 'did:web document; verification methods are the JWKS keys'),
  doc('/.well-known/mcp.json', 'getMcpJson', 'MCP server discovery document'),
  doc('/.well-known/mcp/catalog.json', 'getMcpCatalog', 'MCP Catalog (SEP-2127 draft): points at our Server Card'),
  doc('/mcp/server-card', 'getMcpServerCard', 'MCP Server Card (SEP-2127 draft): identity, endpoint and protocol versions of /mcp', 'application/mcp-server-card+json'),
  doc('/.well-known/mcp/server-card.json', 'getMcpServerCardWellKnown', 'MCP Server Card at the location some frameworks use (same document)', 'application/mcp-server-card+json'),
  doc('/.well-known/ai-plugin.json', 'getAiPlugin', 'AI plugin manifest'),
  doc('/.well-known/oauth-protected-resource', 'getProtectedResourceMetadata', 'OAuth protected resource metadata (RFC 9728)'),
  doc('/.well-known/oauth-authorization-server', 'getAuthorizationServerMetadata', 'OAuth authorization server metadata (RFC 8414)'),
  doc('/llms.txt', 'getLlmsTxt', 'Summary of the service for LLMs', 'text/plain'),
  doc('/openapi.json', 'getOpenApi', 'This document'),
  doc('/', 'getIndex', 'Index of the service: name, version and the URLs of every discovery document'),
  doc('/schemas/mcp-behavioral-evidence-v1.0.json', 'getBehavioralEvidenceSchema', 'JSON Schema of the behavioral evidence document', 'application/schema+json'),
  doc('/robots.txt', 'getRobotsTxt', 'robots.txt: agents and crawlers welcome, with pointers to the agent documents', 'text/plain'),
  doc('/logo.svg', 'getLogo', 'Service logo', 'image/svg+xml'),
  {
    method: 'get',
    path: '/healthz',
    id: 'getHealth',
    tag: 'operations',
    summary: 'Liveness: the process is up (and the embedded database still finishes statements)',
    why: 'operational probe, not an RPC of proto/',
    ok: okJson('live', { type: 'object', properties: { status: { const: 'ok' } }, required: ['status'] }),
    errors: { 503: 'not live; restart the process' },
  },
  {
    method: 'get',
    path: '/readyz',
    id: 'getReadiness',
    tag: 'operations',
    summary: 'Readiness: the database answers',
    why: 'operational probe, not an RPC of proto/',
    ok: okJson('ready', { type: 'object', properties: { status: { const: 'ready' }, database: { type: 'string' } }, required: ['status', 'database'] }),
    errors: { 503: 'the database is not reachable; Retry-After says when to ask again' },
  },
  {
    method: 'get',
    path: '/metrics',
    id: 'getMetrics',
    tag: 'operations',
    summary: 'Prometheus metrics (request counts and latencies by route pattern, ingest, OTLP, database pool)',
    why: 'Prometheus text exposition format',
    ok: { description: 'Prometheus text', content: { 'text/plain': { schema: { type: 'string' } } } },
  },
];

/**
 * fastify routes that are deliberately not in /openapi.json, with the reason. The OpenTelemetry
 * receivers follow the OTLP/HTTP specification (protobuf or JSON bodies, google.rpc.Status
 * errors rather than problem details: docs/telemetry.md); the pages are for people (HTML, their
 * errors readable HTML pages rather than problem details: docs/pages.md); OPTIONS is the CORS
 * pre-flight; HEAD answers each documented GET.
 */
export const NOT_IN_OPENAPI: Readonly<Record<string, string>> = {
  'POST /v1/traces': 'OTLP/HTTP trace receiver (OpenTelemetry specification; docs/telemetry.md)',
  'POST /v1/metrics': 'OTLP/HTTP metrics receiver (OpenTelemetry specification; docs/telemetry.md)',
  'GET /monitor': 'page for people (HTML)',
  'GET /monitor/server/:slug': 'page for people (HTML)',
  'GET /drift': 'page for people (HTML)',
  'GET /atlas/report': 'page for people (HTML)',
  'OPTIONS *': 'CORS pre-flight',
};

/**
 * What a hand-written adapter adds to an annotated RPC's REST path: members of the HTTP request or
 * answer that are not fields of the messages (content negotiation, credentials, rate limits).
 */
export interface RestExtras {
  params?: Param[];
  /** Extra 200 content types (e.g. text/csv beside application/json). */
  okContent?: Record<string, unknown>;
  security?: Record<string, string[]>[];
}

export const REST_EXTRAS: Readonly<Record<string, RestExtras>> = {
  'observatory.v1.ComplianceService.GetComplianceExport': {
    params: [q('format', 'json (default) or csv; without it, Accept: text/csv selects CSV', { type: 'string', enum: ['json', 'csv'] })],
    okContent: { 'text/csv': { schema: { type: 'string' } } },
  },
  'observatory.v1.AccessService.AgentQuery': { security: [{ apiKey: [] }, { x402v2: [] }, { x402: [] }] },
};

export { RATE_LIMITED_PROBES };
