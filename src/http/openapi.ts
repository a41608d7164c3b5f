import { getOption, hasOption, type DescMethod, type DescService } from '@bufbuild/protobuf';
import { INTERFACE_VERSION, type Config } from '../config.js';
import { FAIL_THRESHOLD, PASS_THRESHOLD } from '../domain/verdict.js';
import { http as httpRule } from '../../gen/google/api/annotations_pb.js';
import { AccessService } from '../../gen/observatory/v1/access_pb.js';
import { ComplianceService } from '../../gen/observatory/v1/compliance_pb.js';
import { ReceiptService } from '../../gen/observatory/v1/receipt_pb.js';
import { TelemetryService } from '../../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../../gen/observatory/v1/trust_pb.js';
import { isRequired, SchemaBook } from './contract-schema.js';
import { REST_ADAPTERS, REST_EXTRAS, RATE_LIMITED_PROBES, type Param, type Schema } from './rest-adapters.js';

// /openapi.json, generated: every RPC of proto/ with a google.api.http annotation is an operation
// (method and path template from the annotation, query and path parameters or the JSON body from
// the request message with its buf.validate rules, the 200 schema from the response message as
// src/domain/message-json.ts writes it), plus the hand-written adapters of src/http/rest-adapters.ts.
// What the descriptors cannot say (summaries, the error statuses of each operation) is below, keyed
// by RPC. Errors are RFC 9457 problem details everywhere.

/** The services whose annotated RPCs are REST operations. */
export const REST_SERVICES: readonly DescService[] = [TrustService, TelemetryService, ReceiptService, ComplianceService, AccessService];

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const obj = (properties: Record<string, Schema>, required: string[] = [], description?: string): Schema => ({
  type: 'object',
  ...(description ? { description } : {}),
  properties,
  ...(required.length ? { required } : {}),
});
const str = (description?: string, extra: Schema = {}): Schema => ({ type: 'string', ...(description ? { description } : {}), ...extra });
const int = (description?: string, extra: Schema = {}): Schema => ({ type: 'integer', ...(description ? { description } : {}), ...extra });

const BASE_SCHEMAS: Record<string, Schema> = {
  Problem: obj(
    {
      type: str('problem type URI', { format: 'uri' }),
      title: str(),
      status: int(),
      detail: str(),
      code: str('stable snake_case machine code (not_tracked, invalid_argument, payment_required, rate_limited, ...)'),
      request_id: str(),
      violations: {
        type: 'array',
        description: 'invalid_argument from the buf.validate rules of the contract: the same field path, rule id and message a Connect/gRPC client reads from the buf.validate.Violations error detail',
        items: obj({ field: str('field path (proto names = REST keys)'), rule: str('rule id, e.g. string.max_len'), message: str() }, ['field', 'rule', 'message']),
      },
    },
    ['type', 'title', 'status', 'detail', 'code'],
    'RFC 9457 problem details',
  ),
  JsonRpcResponse: obj({ jsonrpc: { const: '2.0' }, id: { type: ['string', 'integer', 'null'] }, result: {}, error: obj({ code: int(), message: str(), data: {} }, ['code', 'message']) }, ['jsonrpc', 'id']),
  Json: { type: 'object', description: 'JSON object (see the summary for its members)' },
};

interface Notes {
  tag: string;
  summary: string;
  /** Operation id when it differs from the RPC's lowerCamel name (kept stable for existing clients). */
  id?: string;
  errors?: Record<number, string>;
  /** Parameter descriptions by field name. */
  describe?: Record<string, string>;
}

/** Documentation of the annotated RPCs, by RPC name: what the descriptors carry no text for. */
const NOTES: Record<string, Notes> = {
  GetTrust: { tag: 'trust', summary: 'Trust record of a tracked server', errors: { 400: 'url missing or invalid', 404: 'server not tracked' }, describe: { url: 'MCP server URL, or its name, MCP Registry name (io.github.acme/weather) or slug' } },
  Preflight: { tag: 'trust', summary: 'Pre-flight verdict with a signed diligence receipt (counted as demand, never scored)', errors: { 400: 'target missing', 429: 'rate limited (RATE_LIMIT_PREFLIGHT_PER_MINUTE per client address): Retry-After says when to retry' }, describe: { target: 'MCP server URL or name' } },
  GetSkillTrust: { tag: 'trust', summary: 'Trust of a skill in the external skill registry', errors: { 400: 'unsupported registry or missing skill', 404: 'skill not found in the registry', 429: 'rate limited (RATE_LIMIT_SKILL_TRUST_PER_MINUTE per client network): Retry-After says when to retry', 502: 'the registry failed', 503: 'this instance is asking the registry all it may at once: Retry-After says when to retry' }, describe: { registry: 'the one supported registry: clawhub', skill: 'skill slug' } },
  GetDrift: { tag: 'trust', summary: 'Tool-manifest baseline and drift status (records a signed baseline)', errors: { 400: 'server missing', 404: 'server not tracked', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: 'rate limited (RATE_LIMIT_PROBES_PER_MINUTE per client address): Retry-After says when to retry' }, describe: { server: 'server URL or name' } },
  GetDemand: {
    tag: 'trust',
    summary: 'Aggregate pre-flight vetting demand',
    errors: { 400: 'unknown window, limit out of range, a cursor that is not one of ours or of another window, or cursor/limit without window' },
    describe: { window: 'page the targets of this window only (24h, 7d, 30d or alltime)', cursor: 'next_cursor of the previous page', limit: 'targets per page (default 20)' },
  },
  GetSlaTier: { tag: 'trust', summary: 'SLA tier certification (mcp-sla-tier-certification-v1.0)', errors: { 404: 'server not tracked' }, describe: { server: 'server URL or slug; omit it (or leave it empty) for the distribution' } },
  GetTrustDelta: {
    tag: 'trust',
    summary: 'Trust delta feed (mcp-trust-delta-v1.0)',
    errors: { 400: 'unsupported window or list, limit out of range, a cursor that is not one of ours or of another list, or cursor/limit without list' },
    describe: { window: 'time window (default 24h)', list: 'page this list only (new, improved, degraded or at_risk)', cursor: 'next_cursor of the previous page', limit: 'servers per page (default 100)' },
  },
  GetBenchmark: { tag: 'trust', summary: 'Benchmark report (free)', errors: { 404: 'server not tracked' }, describe: { server_slug: 'Server name slug (canonical URL and name also resolve)' } },
  GetStats: { tag: 'trust', summary: 'Index-wide statistics' },
  GetLeaderboard: {
    tag: 'trust',
    summary: 'Servers ranked by trust score',
    errors: { 400: 'limit out of range', 429: 'a search (non-empty q) rate limited (RATE_LIMIT_SEARCH_PER_MINUTE per client address): Retry-After says when to retry' },
    describe: { category: 'category filter', limit: 'number of servers (default 20)' },
  },
  GetAgentReadiness: { tag: 'trust', summary: 'Agent-readiness scores of a site', errors: { 400: 'url missing, invalid or refused', 502: 'the site could not be read', 504: 'the site did not answer in time', 429: RATE_LIMITED_PROBES }, describe: { url: 'site URL' } },
  Report: { tag: 'telemetry', summary: 'Report the outcome of a tool call (only the five fields are kept)', errors: { 400: 'invalid report', 413: 'body too large', 415: 'not JSON' } },
  GetReceipt: { tag: 'receipts', summary: 'Receipt record with live signature re-verification', errors: { 400: 'malformed id', 404: 'receipt not found' }, describe: { receipt_id: '16 lower-case hex' } },
  Verify: { tag: 'receipts', summary: 'Verify a compact JWS against /.well-known/jwks.json (stateless)', errors: { 400: 'jws missing', 422: 'signature invalid or not signed' }, describe: { jws: 'header.payload.signature' } },
  GetBehavioralEvidence: { tag: 'receipts', summary: 'Behavioral evidence (mcp-behavioral-evidence-v1.0)', errors: { 400: 'url missing or invalid', 429: 'rate limited (the pre-flight bucket, RATE_LIMIT_PREFLIGHT_PER_MINUTE per client network): Retry-After says when to retry' }, describe: { url: 'MCP server URL' } },
  GetErc8004Attestation: { tag: 'receipts', summary: 'ERC-8004 endpoint health attestation (signs and stores a receipt)', errors: { 400: 'url missing or invalid', 429: 'rate limited (the pre-flight bucket, RATE_LIMIT_PREFLIGHT_PER_MINUTE per client network): Retry-After says when to retry' }, describe: { url: 'MCP server URL' } },
  VerifyReceipt: { tag: 'receipts', summary: 'Verify the receipt id returned by /agent-query', errors: { 400: 'malformed or missing id', 404: 'receipt not found' }, describe: { id: 'receipt_id, 16 lower-case hex' } },
  GetComplianceExport: { tag: 'compliance', id: 'getComplianceReport', summary: 'Governance export for a server over a date range', errors: { 400: 'server_url missing or dates invalid', 429: RATE_LIMITED_PROBES }, describe: { server_url: 'MCP server URL', agent_id: 'agent identifier', start_date: 'first day (YYYY-MM-DD)', end_date: 'last day (YYYY-MM-DD)' } },
  GetAgencyChecklist: { tag: 'compliance', summary: 'Per-control checklist (independent mapping, not affiliated with any agency)', errors: { 400: 'url missing or invalid', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: RATE_LIMITED_PROBES }, describe: { url: 'MCP server URL' } },
  GetComplianceAttestation: { tag: 'compliance', summary: 'Compliance attestation with ci.exit_code', errors: { 400: 'server missing or standard unsupported', 502: 'the server could not be read', 504: 'the server did not answer in time', 429: RATE_LIMITED_PROBES }, describe: { server: 'MCP server URL', standard: 'standard: agency-mcp-2026 (default)' } },
  AgentQuery: { tag: 'access', summary: 'Paid trust verdict with a signed receipt id (trial key or x402 payment)', errors: { 401: 'unknown API key', 402: 'payment required: x402 v1 body (wallet, amount, instructions, accepts) and the x402 v2 PAYMENT-REQUIRED header', 404: 'server not tracked', 429: 'too many payment look-ups on the chain from one client network', 502: 'the chain RPC or the facilitator is unavailable' }, describe: { server_slug: 'server name, slug or URL' } },
  GetPaymentInfo: { tag: 'access', summary: 'Payment configuration (x402 v1 and v2)' },
  RegisterAgent: { tag: 'access', id: 'register', summary: 'Anonymous registration: a trial API key (scope trust:read, 50 checks, no expiry)', errors: { 400: 'unsupported type', 429: 'more than 5 registrations per hour from one address' } },
};

/** An RPC reachable over REST: its google.api.http binding. */
export interface RestBinding {
  rpc: DescMethod;
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI path template, e.g. /benchmark/{server_slug}. */
  path: string;
  /** Field names bound to path segments. */
  pathParams: string[];
  /** "*" (the whole message is the JSON body), a field name, or "" (no body: query parameters). */
  body: string;
}

/** Every google.api.http binding of the REST services, in contract order. */
export function restBindings(services: readonly DescService[] = REST_SERVICES): RestBinding[] {
  const out: RestBinding[] = [];
  for (const service of services) {
    for (const rpc of service.methods) {
      if (!hasOption(rpc, httpRule)) continue;
      const rule = getOption(rpc, httpRule);
      const p = rule.pattern;
      if (p.case === undefined || p.case === 'custom') throw new Error(`${rpc.parent.typeName}.${rpc.name}: unsupported google.api.http pattern`);
      const path = p.value;
      const pathParams = [...path.matchAll(/\{([a-z0-9_]+)(?:=[^}]*)?\}/g)].map((m) => m[1]!);
      out.push({ rpc, method: p.case, path: path.replace(/\{([a-z0-9_]+)=[^}]*\}/g, '{$1}'), pathParams, body: rule.body });
    }
  }
  return out;
}

const lowerFirst = (s: string) => s.charAt(0).toLowerCase() + s.slice(1);

const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ref('Problem') } } });


function rpcOperation(b: RestBinding, book: SchemaBook) {
  const notes = NOTES[b.rpc.name];
  if (!notes) throw new Error(`src/http/openapi.ts has no summary for ${b.rpc.parent.typeName}.${b.rpc.name}`);
  const extras = REST_EXTRAS[`${b.rpc.parent.typeName}.${b.rpc.name}`] ?? {};
  const input = b.rpc.input;
  const params: Param[] = [];
  if (b.body !== '*') {
    for (const f of input.fields) {
      if (f.name === b.body) continue;
      const inPath = b.pathParams.includes(f.name);
      params.push({ name: f.name, in: inPath ? 'path' : 'query', required: inPath || isRequired(f), description: notes.describe?.[f.name] ?? f.name, schema: book.fieldSchema(f) });
    }
  }
  params.push(...(extras.params ?? []));
  const responses: Record<string, unknown> = {
    200: { description: `${b.rpc.output.name}`, content: { 'application/json': { schema: book.ref(b.rpc.output, 'response') }, ...(extras.okContent ?? {}) } },
  };
  for (const [status, why] of Object.entries(notes.errors ?? {})) responses[status] = problem(why);
  if (!responses['400'] && input.fields.some((f) => isRequired(f) || Object.keys(book.fieldSchema(f)).length > 1)) responses['400'] = problem('a rule of the request is broken (violations lists them)');
  responses['500'] = problem('internal error (no details)');
  responses['503'] = problem('database unavailable; retry after Retry-After');
  return {
    operationId: notes.id ?? lowerFirst(b.rpc.name),
    tags: [notes.tag],
    summary: notes.summary,
    description: `RPC ${b.rpc.parent.typeName}/${b.rpc.name} (Connect, gRPC, gRPC-Web on this port); request rules from its buf.validate annotations.`,
    ...(params.length ? { parameters: params } : {}),
    ...(b.body === '*' ? { requestBody: { required: b.rpc.name !== 'RegisterAgent', content: { 'application/json': { schema: book.ref(input, 'request') } } } } : {}),
    ...(extras.security ? { security: extras.security } : {}),
    responses,
  };
}

export function openApiDocument(config: Config, services: readonly DescService[] = REST_SERVICES) {
  const book = new SchemaBook();
  const paths: Record<string, Record<string, unknown>> = {};
  for (const b of restBindings(services)) (paths[b.path] ??= {})[b.method] = rpcOperation(b, book);
  for (const op of REST_ADAPTERS) {
    const responses: Record<string, unknown> = { 200: op.ok };
    for (const [status, why] of Object.entries(op.errors ?? {})) responses[status] = problem(why);
    if (op.tag !== 'discovery' && op.tag !== 'operations') {
      responses['500'] = problem('internal error (no details)');
      responses['503'] = problem('database unavailable; retry after Retry-After');
    }
    (paths[op.path] ??= {})[op.method] = {
      operationId: op.id,
      tags: [op.tag],
      summary: op.summary,
      description: `Hand-written adapter (src/http/rest-adapters.ts): ${op.why}.`,
      ...(op.params ? { parameters: op.params } : {}),
      ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: op.body } } } } : {}),
      responses,
    };
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
    tags: ['trust', 'telemetry', 'receipts', 'compliance', 'access', 'agents', 'discovery', 'operations'].map((name) => ({ name })),
    paths,
    components: {
      schemas: { ...BASE_SCHEMAS, ...book.schemas },
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
  return [
    ...restBindings().map((b) => ({ method: b.method.toUpperCase(), path: b.path, summary: NOTES[b.rpc.name]?.summary ?? b.rpc.name })),
    ...REST_ADAPTERS.map((o) => ({ method: o.method.toUpperCase(), path: o.path, summary: o.summary })),
  ];
}
