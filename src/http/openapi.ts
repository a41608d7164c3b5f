import { INTERFACE_VERSION, type Config } from '../config.js';
import { FAIL_THRESHOLD, PASS_THRESHOLD } from '../domain/verdict.js';

// /openapi.json: OpenAPI 3.1 description of every REST path of SPEC.md section 4 (plus the agent
// endpoints and discovery documents). Errors are RFC 9457 problem details everywhere.

type Schema = Record<string, unknown>;
type Param = { name: string; in: 'query' | 'path' | 'header'; required?: boolean; description: string; schema: Schema };

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const obj = (properties: Record<string, Schema>, required: string[] = [], description?: string): Schema => ({
  type: 'object',
  ...(description ? { description } : {}),
  properties,
  ...(required.length ? { required } : {}),
});
const str = (description?: string, extra: Schema = {}): Schema => ({ type: 'string', ...(description ? { description } : {}), ...extra });
const num = (description?: string, extra: Schema = {}): Schema => ({ type: 'number', ...(description ? { description } : {}), ...extra });
const int = (description?: string, extra: Schema = {}): Schema => ({ type: 'integer', ...(description ? { description } : {}), ...extra });
const nullable = (s: Schema): Schema => ({ ...s, type: [s.type as string, 'null'] });
const verdict = { type: 'string', enum: ['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'] };

const q = (name: string, description: string, schema: Schema, required = false): Param => ({ name, in: 'query', required, description, schema });
const urlParam = (name = 'url', description = 'MCP server URL') => q(name, description, { type: 'string', format: 'uri' }, true);
const slugParam: Param = { name: 'server_slug', in: 'path', required: true, description: 'Server name slug (canonical URL and name also resolve)', schema: { type: 'string' } };

const SCHEMAS: Record<string, Schema> = {
  Problem: obj(
    {
      type: str('problem type URI', { format: 'uri' }),
      title: str(),
      status: int(),
      detail: str(),
      code: str('stable snake_case machine code (not_tracked, invalid_argument, payment_required, rate_limited, ...)'),
      request_id: str(),
    },
    ['type', 'title', 'status', 'detail', 'code'],
    'RFC 9457 problem details',
  ),
  TrustRecord: obj(
    {
      server: obj(
        {
          name: str(),
          url: str(undefined, { format: 'uri' }),
          slug: str(),
          category: str(),
          trust_score: num('0 to 100', { minimum: 0, maximum: 100 }),
          registered_at: str(undefined, { format: 'date-time' }),
          protocol_version: nullable(str('MCP protocol revision the server spoke at its latest probe (e.g. 2026-07-28); null before any probe')),
        },
        ['name', 'url', 'category', 'trust_score', 'registered_at'],
      ),
      metrics: obj({ total_interactions: int(), avg_latency_ms: num(), success_rate: nullable(num('0 to 1', { minimum: 0, maximum: 1 })) }, ['total_interactions', 'avg_latency_ms', 'success_rate']),
      category_baseline: obj(
        { category: str(), avg_latency_ms: num(), p95_latency_ms: num(), avg_success_rate: num(), server_count: int() },
        ['category', 'avg_latency_ms', 'p95_latency_ms', 'avg_success_rate', 'server_count'],
      ),
      anomaly: obj({ is_anomalous: { type: 'boolean' }, anomaly_flags: { type: 'array', items: str() } }, ['is_anomalous', 'anomaly_flags']),
      score_breakdown: { type: ['object', 'null'], description: 'additive explanation of the score' },
      verdict,
      server_card: { anyOf: [ref('ServerCardCheck'), { type: 'null' }] },
    },
    ['server', 'metrics', 'category_baseline', 'anomaly'],
    'Trust record (SPEC 2.1)',
  ),
  ServerCardCheck: obj(
    {
      card_url: str(undefined, { format: 'uri' }),
      checked_at: str(undefined, { format: 'date-time' }),
      matches: { type: 'boolean' },
      differences: {
        type: 'array',
        items: obj({ field: str('name, version, title, endpoint, transport, protocol_versions or tools'), claimed: str(), observed: str(), detail: str() }, ['field', 'claimed', 'observed', 'detail']),
      },
    },
    ['card_url', 'checked_at', 'matches', 'differences'],
    "The server's MCP Server Card (SEP-2127) against runtime at its latest probe; a mismatch raises server_card_mismatch and changes no score",
  ),
  Preflight: obj(
    {
      target: str(),
      server_url: nullable(str()),
      verdict,
      trust_score: nullable(num()),
      recommendation: str(),
      diligence_receipt: str('compact JWS (header.payload.signature)'),
      receipt_id: str(undefined, { pattern: '^[0-9a-f]{16}$' }),
      checked_at: str(undefined, { format: 'date-time' }),
      anomaly_flags: { type: 'array', items: str() },
      server_card: { anyOf: [ref('ServerCardCheck'), { type: 'null' }] },
    },
    ['verdict', 'recommendation', 'diligence_receipt', 'receipt_id'],
  ),
  TelemetryReport: {
    ...obj(
      {
        server_url: str('MCP server that was called', { format: 'uri' }),
        success: { type: 'boolean' },
        latency_ms: num('round-trip latency in milliseconds', { minimum: 0 }),
        tool_name: str('tool that was called'),
        http_status: int('HTTP status code returned'),
      },
      ['server_url', 'success', 'latency_ms'],
    ),
    additionalProperties: false,
  },
  BehavioralEvidence: obj(
    {
      schema: { const: 'mcp-behavioral-evidence-v1.0' },
      server_url: str(),
      observed_at: str(undefined, { format: 'date-time' }),
      observer: str(),
      found: { type: 'boolean' },
      trust_score: nullable(num()),
      behavioral_summary: { type: 'object' },
    },
    ['schema', 'server_url', 'observed_at', 'observer', 'found'],
  ),
  Credential: obj(
    {
      api_key: str(),
      credential_type: { const: 'api_key' },
      scopes: { type: 'array', items: str() },
      trial_limit: int(),
      credential_expires: { type: 'null' },
    },
    ['api_key', 'credential_type', 'scopes', 'trial_limit', 'credential_expires'],
  ),
  PaymentRequired: obj(
    { wallet: nullable(str()), amount: str(), currency: str(), chain: str(), chain_id: int(), instructions: str(), accepts: { type: 'array', items: { type: 'object' } }, x402_version: int() },
    ['wallet', 'amount', 'instructions'],
  ),
  JsonRpcResponse: obj({ jsonrpc: { const: '2.0' }, id: { type: ['string', 'integer', 'null'] }, result: {}, error: obj({ code: int(), message: str(), data: {} }, ['code', 'message']) }, ['jsonrpc', 'id']),
  Json: { type: 'object', description: 'JSON object (see the summary for its members)' },
};

const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ref('Problem') } } });
const okJson = (description: string, schema: Schema = ref('Json')) => ({ description, content: { 'application/json': { schema } } });

interface Op {
  method: 'get' | 'post';
  path: string;
  id: string;
  tag: string;
  summary: string;
  params?: Param[];
  body?: Schema;
  ok: Record<string, unknown>;
  errors?: Record<number, string>;
  security?: Record<string, string[]>[];
}

const OPS: Op[] = [
  { method: 'get', path: '/api/trust', id: 'getTrust', tag: 'trust', summary: 'Trust record of a tracked server', params: [q('url', 'MCP server URL, or its name, MCP Registry name (io.github.acme/weather) or slug', { type: 'string' }, true)], ok: okJson('trust record', ref('TrustRecord')), errors: { 400: 'url missing or invalid', 404: 'server not tracked' } },
  { method: 'get', path: '/v1/preflight', id: 'preflight', tag: 'trust', summary: 'Pre-flight verdict with a signed diligence receipt (counted as demand, never scored)', params: [q('target', 'MCP server URL or name', { type: 'string' }, true)], ok: okJson('verdict, recommendation and receipt', ref('Preflight')), errors: { 400: 'target missing', 429: 'rate limited (RATE_LIMIT_PREFLIGHT_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/v1/gate', id: 'gate', tag: 'trust', summary: 'Gateway decision for nginx auth_request / Envoy ext_authz (any method, and every path below /v1/gate): 200 allow or 403 deny, both with X-Trust-Verdict, X-Trust-Score, X-Trust-Receipt and a signed gateway receipt (docs/gateway.md)', params: [
    { name: 'X-Mcp-Server', in: 'header', description: 'upstream MCP server (full URL); first choice', schema: { type: 'string', format: 'uri' } },
    { name: 'X-Original-URL', in: 'header', description: 'the original request URL; used when X-Mcp-Server is absent', schema: { type: 'string', format: 'uri' } },
    { name: 'X-Forwarded-Proto', in: 'header', description: 'with X-Forwarded-Host and X-Original-URI, the original request URL', schema: { type: 'string' } },
    { name: 'X-Forwarded-Host', in: 'header', description: 'see X-Forwarded-Proto', schema: { type: 'string' } },
    { name: 'X-Original-URI', in: 'header', description: 'see X-Forwarded-Proto', schema: { type: 'string' } },
  ], ok: okJson('allow: allow, decision, reason, upstream, verdict, trust_score, receipt_id, receipt_url'), errors: { 400: 'no upstream can be worked out from the headers (or GATE_ROUTES)', 403: 'deny: the same decision members in a problem body', 429: 'rate limited (RATE_LIMIT_GATE_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/v1/trust', id: 'getSkillTrust', tag: 'trust', summary: 'Trust of a skill in the external skill registry', params: [q('registry', 'the one supported registry', { type: 'string', enum: ['clawhub'] }, true), q('skill', 'skill slug', { type: 'string' }, true)], ok: okJson('score, badge and source signals'), errors: { 400: 'unsupported registry or missing skill', 404: 'skill not found in the registry', 502: 'the registry failed' } },
  { method: 'get', path: '/api/drift', id: 'getDrift', tag: 'trust', summary: 'Tool-manifest baseline and drift status (records a signed baseline)', params: [q('server', 'server URL or name', { type: 'string' }, true)], ok: okJson('baseline and drift status'), errors: { 400: 'server missing', 404: 'server not tracked', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/api/demand', id: 'getDemand', tag: 'trust', summary: 'Aggregate pre-flight vetting demand', ok: okJson('which servers are vetted, how often, verdict mix') },
  { method: 'get', path: '/api/sla-tier', id: 'getSlaTier', tag: 'trust', summary: 'SLA tier certification (mcp-sla-tier-certification-v1.0)', params: [q('server', 'server URL or slug; omit it (or leave it empty) for the distribution', { type: 'string' })], ok: okJson('tier of one server, or the tier distribution'), errors: { 404: 'server not tracked' } },
  { method: 'get', path: '/api/trust-delta', id: 'getTrustDelta', tag: 'trust', summary: 'Trust delta feed (mcp-trust-delta-v1.0)', params: [q('window', 'time window', { type: 'string', enum: ['24h', '48h', '7d'], default: '24h' })], ok: okJson('new, improved, degraded and at-risk servers'), errors: { 400: 'unsupported window' } },
  { method: 'get', path: '/benchmark/{server_slug}', id: 'getBenchmark', tag: 'trust', summary: 'Benchmark report (free)', params: [slugParam], ok: okJson('trust grade, verdict, reliability, latency, volume'), errors: { 404: 'server not tracked' } },
  { method: 'get', path: '/api/stats', id: 'getStats', tag: 'trust', summary: 'Index-wide statistics', ok: okJson('servers tracked (rated and unrated, per category), interactions, verdict mix') },
  { method: 'get', path: '/api/leaderboard', id: 'getLeaderboard', tag: 'trust', summary: 'Servers ranked by trust score', params: [q('category', 'category filter', { type: 'string' }), q('limit', 'number of servers', { type: 'integer', minimum: 1, maximum: 100, default: 20 }), q('cursor', 'next_cursor of the previous page (opaque; same filter)', { type: 'string' }), q('q', 'only servers whose name, slug or URL contains this text', { type: 'string', maxLength: 200 }), q('verdict', 'only ranked servers with this verdict', { type: 'string', enum: ['PASS', 'UNCERTAIN', 'FAIL'] })], ok: okJson('rated servers ranked by score, unrated_count: tracked servers without runtime evidence, not ranked, and next_cursor while more pages follow'), errors: { 400: 'limit out of range, unknown verdict, or a cursor not issued for this filter' } },
  { method: 'get', path: '/api/agent-readiness', id: 'getAgentReadiness', tag: 'trust', summary: 'Agent-readiness scores of a site', params: [urlParam('url', 'site URL')], ok: okJson('readiness scores and detected surfaces'), errors: { 400: 'url missing, invalid or refused', 502: 'the site could not be read', 504: 'the site did not answer in time', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/api/badge', id: 'getBadge', tag: 'trust', summary: 'Trust badge', params: [urlParam()], ok: { description: 'SVG badge', content: { 'image/svg+xml': { schema: { type: 'string' } } } }, errors: { 400: 'url missing, invalid or refused', 502: 'the server could not be read', 504: 'the server did not answer in time' } },
  { method: 'post', path: '/api/report', id: 'report', tag: 'telemetry', summary: 'Report the outcome of a tool call (only the five fields are kept)', body: ref('TelemetryReport'), ok: okJson('report accepted', obj({ recorded: { const: true }, server_url: str() }, ['recorded', 'server_url'])), errors: { 400: 'invalid report', 413: 'body too large', 415: 'not JSON' } },
  { method: 'get', path: '/v1/receipt/{receipt_id}', id: 'getReceipt', tag: 'receipts', summary: 'Receipt record with live signature re-verification', params: [{ name: 'receipt_id', in: 'path', required: true, description: '16 lower-case hex', schema: { type: 'string', pattern: '^[0-9a-f]{16}$' } }], ok: okJson('receipt_id, issued_at, claim, jws, verification'), errors: { 400: 'malformed id', 404: 'receipt not found' } },
  { method: 'get', path: '/v1/verify', id: 'verify', tag: 'receipts', summary: 'Verify a compact JWS against /.well-known/jwks.json (stateless)', params: [q('jws', 'header.payload.signature', { type: 'string' }, true)], ok: okJson('valid, header and payload'), errors: { 400: 'jws missing', 422: 'signature invalid or not signed' } },
  { method: 'get', path: '/v1/behavioral-evidence', id: 'getBehavioralEvidence', tag: 'receipts', summary: 'Behavioral evidence (mcp-behavioral-evidence-v1.0)', params: [urlParam()], ok: okJson('behavioral evidence', ref('BehavioralEvidence')), errors: { 400: 'url missing or invalid' } },
  { method: 'get', path: '/v1/erc8004-attestation', id: 'getErc8004Attestation', tag: 'receipts', summary: 'ERC-8004 endpoint health attestation', params: [urlParam()], ok: okJson('signed endpoint health attestation'), errors: { 400: 'url missing or invalid' } },
  { method: 'get', path: '/v1/verify-receipt', id: 'verifyReceipt', tag: 'receipts', summary: 'Verify the receipt id returned by /agent-query', params: [q('receipt_id', '16 lower-case hex', { type: 'string', pattern: '^[0-9a-f]{16}$' })], ok: okJson('receipt verification'), errors: { 400: 'malformed or missing id', 404: 'receipt not found' } },
  { method: 'get', path: '/api/compliance', id: 'getComplianceReport', tag: 'compliance', summary: 'Governance export for a server over a date range', params: [urlParam('server_url'), q('agent_id', 'agent identifier', { type: 'string' }), q('start_date', 'first day', { type: 'string', format: 'date' }), q('end_date', 'last day', { type: 'string', format: 'date' })], ok: okJson('governance export'), errors: { 400: 'server_url missing or dates invalid', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/api/agency-checklist', id: 'getAgencyChecklist', tag: 'compliance', summary: 'Per-control checklist (independent mapping, not affiliated with any agency)', params: [urlParam()], ok: okJson('controls and compliance_summary'), errors: { 400: 'url missing or invalid', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/v1/compliance', id: 'getComplianceAttestation', tag: 'compliance', summary: 'Compliance attestation with ci.exit_code', params: [urlParam('server', 'MCP server URL'), q('standard', 'standard', { type: 'string', enum: ['agency-mcp-2026'], default: 'agency-mcp-2026' })], ok: okJson('per-dimension results, overall_result, ci'), errors: { 400: 'server missing or standard unsupported', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' } },
  { method: 'get', path: '/agent-query/{server_slug}', id: 'agentQuery', tag: 'access', summary: `Paid trust verdict with a signed receipt id (trial key or x402 payment)`, params: [{ ...slugParam, description: 'server name, slug or URL' }], security: [{ apiKey: [] }, { x402v2: [] }, { x402: [] }], ok: okJson('verdict, score, latency, p95 and receipt_id; a paid answer carries the PAYMENT-RESPONSE header'), errors: { 401: 'unknown API key', 402: 'payment required: x402 v1 body (wallet, amount, instructions, accepts) and the x402 v2 PAYMENT-REQUIRED header', 404: 'server not tracked', 429: 'too many payment look-ups on the chain from one client network', 502: 'the chain RPC or the facilitator is unavailable' } },
  { method: 'get', path: '/api/payment-info', id: 'getPaymentInfo', tag: 'access', summary: 'Payment configuration (x402 v1 and v2)', ok: okJson('wallet, amount, currency, chain, x402_versions and how each version pays') },
  { method: 'post', path: '/agent/auth', id: 'register', tag: 'access', summary: 'Anonymous registration: a trial API key (scope trust:read, 50 checks, no expiry)', body: obj({ type: { type: 'string', enum: ['anonymous'], default: 'anonymous' }, requested_credential_type: { type: 'string', enum: ['api_key'], default: 'api_key' } }, []), ok: okJson('credential', ref('Credential')), errors: { 400: 'unsupported type', 429: 'more than 5 registrations per hour from one address' } },
  { method: 'get', path: '/a2a', id: 'getA2aDescriptor', tag: 'agents', summary: 'A2A JSON-RPC descriptor: methods, skills, usage example', ok: okJson('descriptor') },
  { method: 'post', path: '/a2a', id: 'a2a', tag: 'agents', summary: 'A2A 1.0 and 0.3 over JSON-RPC 2.0 (A2A-Version header: 1.0 for SendMessage, GetTask, ListTasks, CancelTask, ...; none or 0.3 for message/send, tasks/get, ...). Streaming methods answer text/event-stream; errors are JSON-RPC errors with HTTP 200', body: { oneOf: [{ type: 'object' }, { type: 'array' }] }, ok: okJson('JSON-RPC response (or an array for a batch)', { oneOf: [ref('JsonRpcResponse'), { type: 'array', items: ref('JsonRpcResponse') }] }), errors: { 413: 'body too large', 415: 'not JSON' } },
  { method: 'get', path: '/mcp', id: 'getMcpDiscovery', tag: 'agents', summary: 'MCP discovery document (without Accept: text/event-stream)', ok: okJson('server info and tools') },
  { method: 'post', path: '/mcp', id: 'mcp', tag: 'agents', summary: 'MCP Streamable HTTP (stateless): 2026-07-28 (server/discover, no initialize) and 2025-11-25 back to 2024-11-05 (initialize); tools preflight_check, check_trust, verify_attestation', body: { type: 'object' }, ok: okJson('JSON-RPC response', ref('JsonRpcResponse')), errors: { 413: 'body too large', 415: 'not JSON' } },
];

const DOCS: [path: string, id: string, summary: string, type?: string][] = [
  ['/.well-known/jwks.json', 'getJwks', 'Public Ed25519 keys (JWK Set) that verify every receipt'],
  ['/.well-known/agent-card.json', 'getAgentCard', 'A2A agent card (a signed 1.0 card that 0.3 clients read too)'],
  ['/.well-known/agent.json', 'getAgentJson', 'A2A agent card (legacy location)'],
  ['/.well-known/did.json', 'getDidDocument', 'did:web document; verification methods are the JWKS keys'],
  ['/.well-known/mcp.json', 'getMcpJson', 'MCP server discovery document'],
  ['/.well-known/mcp/catalog.json', 'getMcpCatalog', 'MCP Catalog (SEP-2127 draft): points at our Server Card'],
  ['/mcp/server-card', 'getMcpServerCard', 'MCP Server Card (SEP-2127 draft): identity, endpoint and protocol versions of /mcp', 'application/mcp-server-card+json'],
  ['/.well-known/mcp/server-card.json', 'getMcpServerCardWellKnown', 'MCP Server Card at the location some frameworks use (same document)', 'application/mcp-server-card+json'],
  ['/.well-known/ai-plugin.json', 'getAiPlugin', 'AI plugin manifest'],
  ['/.well-known/oauth-protected-resource', 'getProtectedResourceMetadata', 'OAuth protected resource metadata (RFC 9728)'],
  ['/.well-known/oauth-authorization-server', 'getAuthorizationServerMetadata', 'OAuth authorization server metadata (RFC 8414)'],
  ['/llms.txt', 'getLlmsTxt', 'Summary of the service for LLMs', 'text/plain'],
  ['/openapi.json', 'getOpenApi', 'This document'],
];

export function openApiDocument(config: Config) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPS) {
    const responses: Record<string, unknown> = { 200: op.ok };
    for (const [status, why] of Object.entries(op.errors ?? {})) responses[status] = problem(why);
    responses['500'] = problem('internal error (no details)');
    responses['503'] = problem('database unavailable; retry after Retry-After');
    (paths[op.path] ??= {})[op.method] = {
      operationId: op.id,
      tags: [op.tag],
      summary: op.summary,
      ...(op.params ? { parameters: op.params } : {}),
      ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: op.body } } } } : {}),
      ...(op.security ? { security: op.security } : {}),
      responses,
    };
  }
  for (const [path, id, summary, type] of DOCS) {
    paths[path] = { get: { operationId: id, tags: ['discovery'], summary, responses: { 200: { description: summary, content: { [type ?? 'application/json']: { schema: type && !type.endsWith('+json') ? { type: 'string' } : ref('Json') } } } } } };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Trust Observatory',
      version: INTERFACE_VERSION,
      summary: 'Runtime trust scores, signed receipts and pre-flight checks for MCP servers',
      description:
        `Scores MCP servers on observed runtime behaviour. Trust score 0 to 100: PASS >= ${PASS_THRESHOLD}, UNCERTAIN ${FAIL_THRESHOLD} to ${PASS_THRESHOLD - 1}, ` +
        `FAIL < ${FAIL_THRESHOLD}; UNRATED when there is no runtime evidence. Receipts are Ed25519 compact JWS verifiable against /.well-known/jwks.json. ` +
        'Errors are RFC 9457 problem details (application/problem+json) with a stable code.',
    },
    servers: [{ url: config.publicBaseUrl }],
    tags: ['trust', 'telemetry', 'receipts', 'compliance', 'access', 'agents', 'discovery'].map((name) => ({ name })),
    paths,
    components: {
      schemas: SCHEMAS,
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'API key from POST /agent/auth' },
        x402v2: { type: 'apiKey', in: 'header', name: 'PAYMENT-SIGNATURE', description: 'x402 v2 PaymentPayload (base64 JSON, EIP-3009 authorization), settled through the facilitator' },
        x402: { type: 'apiKey', in: 'header', name: 'X-Payment', description: 'x402 v1: a v1 payment payload, or JSON {tx_hash, resource, issued_at, signature} for a mined USDC transfer with the payer proof' },
      },
    },
  };
}

/** Every path (OpenAPI template form) with its methods, for llms.txt and the cross-check tests. */
export function documentedOperations(): { method: string; path: string; summary: string }[] {
  return [...OPS.map((o) => ({ method: o.method.toUpperCase(), path: o.path, summary: o.summary })), ...DOCS.map(([path, , summary]) => ({ method: 'GET', path, summary }))];
}
