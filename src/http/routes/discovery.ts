import type { FastifyInstance } from 'fastify';
import { INTERFACE_VERSION, type Config } from '../../config.js';
import { FAIL_THRESHOLD, PASS_THRESHOLD } from '../../domain/verdict.js';
import { agentCardPublisher, A2A_SKILLS } from '../../agents/a2a-card.js';
import { mcpDiscoveryDocument } from '../../agents/mcp.js';
import { MCP_TOOL_NAMES } from '../../agents/mcp-tool-names.js';
import type { PublicJwk } from '../../signing/keyring.js';
import type { RouteDeps } from '../routes.js';
import { documentedOperations, openApiDocument } from '../openapi.js';
import { DISCOVERY_CACHE_CONTROL } from './well-known.js';
import { sharedAnswer } from '../answer-budget.js';

// Discovery documents (SPEC 1.8): each valid for its own standard, all built from the same
// config and tables (agent skills, MCP tools, JWKS, OpenAPI operations), so they cannot disagree.

/** did:web identifier of a base URL (W3C did:web: port percent-encoded, path segments joined by ':'). */
export function didWebFor(baseUrl: string): string {
  const u = new URL(baseUrl);
  const host = u.port ? `${u.hostname}%3A${u.port}` : u.hostname;
  const segments = u.pathname.split('/').filter(Boolean).map(encodeURIComponent);
  return ['did:web', host, ...segments].join(':');
}

export function didDocument(config: Config, keys: PublicJwk[]) {
  const did = didWebFor(config.publicBaseUrl);
  const base = config.publicBaseUrl;
  const ids = keys.map((k) => `${did}#${k.kid}`);
  return {
    '@context': ['https://www.w3.org/ns/did/v1', 'https://w3id.org/security/suites/jws-2020/v1'],
    id: did,
    verificationMethod: keys.map((k) => ({
      id: `${did}#${k.kid}`,
      type: 'JsonWebKey2020',
      controller: did,
      // Exactly the JWKS entry, retirement time (`exp`) included: a DID resolver gets the same rules.
      publicKeyJwk: { kty: k.kty, crv: k.crv, x: k.x, kid: k.kid, alg: k.alg, use: k.use, ...(k.exp !== undefined ? { exp: k.exp } : {}) },
    })),
    assertionMethod: ids,
    authentication: ids,
    service: [
      { id: `${did}#a2a`, type: 'A2AAgent', serviceEndpoint: `${base}/.well-known/agent-card.json` },
      { id: `${did}#mcp`, type: 'MCPServer', serviceEndpoint: `${base}/mcp` },
      { id: `${did}#jwks`, type: 'JsonWebKeySet', serviceEndpoint: `${base}/.well-known/jwks.json` },
      { id: `${did}#api`, type: 'OpenAPI', serviceEndpoint: `${base}/openapi.json` },
    ],
  };
}

export function aiPluginManifest(config: Config) {
  const base = config.publicBaseUrl;
  return {
    schema_version: 'v1',
    name_for_human: 'Trust Observatory',
    name_for_model: 'trust_observatory',
    description_for_human: 'Trust scores and signed pre-flight verdicts for MCP servers, from observed runtime behaviour.',
    description_for_model:
      `Check an MCP server before calling it: GET /v1/preflight?target=<server> returns PASS (score >= ${PASS_THRESHOLD}, proceed), ` +
      `UNCERTAIN (${FAIL_THRESHOLD}-${PASS_THRESHOLD - 1}, caution), FAIL (< ${FAIL_THRESHOLD}, block) or UNRATED (no evidence) with a signed receipt. ` +
      'GET /api/trust?url=<server> gives the full trust record. After calling a server, POST /api/report with server_url, success, latency_ms ' +
      '(optional tool_name, http_status); nothing else is collected.',
    auth: { type: 'none' },
    api: { type: 'openapi', url: `${base}/openapi.json`, is_user_authenticated: false },
    logo_url: `${base}/logo.svg`,
    legal_info_url: `${base}/llms.txt`,
  };
}

export function protectedResourceMetadata(config: Config) {
  const base = config.publicBaseUrl;
  return {
    resource: base,
    authorization_servers: [base],
    scopes_supported: ['trust:read'],
    bearer_methods_supported: ['header'],
    resource_name: 'Trust Observatory',
    resource_documentation: `${base}/llms.txt`,
  };
}

export function authorizationServerMetadata(config: Config) {
  const base = config.publicBaseUrl;
  return {
    issuer: base,
    // Credentials come from POST /agent/auth (JSON body {type:"anonymous", requested_credential_type:"api_key"}):
    // an opaque bearer API key with scope trust:read. No authorization-code or other OAuth grant is offered.
    token_endpoint: `${base}/agent/auth`,
    token_endpoint_auth_methods_supported: ['none'],
    response_types_supported: [],
    grant_types_supported: [],
    scopes_supported: ['trust:read'],
    service_documentation: `${base}/llms.txt`,
    jwks_uri: `${base}/.well-known/jwks.json`,
    agent_registration: {
      endpoint: `${base}/agent/auth`,
      method: 'POST',
      content_type: 'application/json',
      types_supported: ['anonymous'],
      credential_types_supported: ['api_key'],
      trial_limit: 50,
    },
  };
}

export function llmsTxt(config: Config): string {
  const base = config.publicBaseUrl;
  const ops = documentedOperations();
  const line = (o: { method: string; path: string; summary: string }) => `- ${o.method} [${o.path}](${base}${o.path}): ${o.summary}`;
  return [
    '# Trust Observatory',
    '',
    `> Scores MCP servers on observed runtime behaviour (trust score 0-100) and issues Ed25519-signed diligence receipts. Interface version ${INTERFACE_VERSION}.`,
    '',
    'Agents check trust before calling an MCP tool and report the outcome afterwards. Pre-flight checks count as demand only; they never change a score.',
    '',
    '## Verdicts',
    '',
    `- PASS: trust_score >= ${PASS_THRESHOLD}, proceed`,
    `- UNCERTAIN: ${FAIL_THRESHOLD} <= trust_score < ${PASS_THRESHOLD}, caution`,
    `- FAIL: trust_score < ${FAIL_THRESHOLD}, block`,
    '- UNRATED: no runtime evidence (no accepted telemetry) for the server',
    '',
    '## Agent interfaces',
    '',
    `- MCP (Streamable HTTP, stateless): POST ${base}/mcp with tools ${MCP_TOOL_NAMES.join(', ')}; MCP 2026-07-28 clients need no initialize (server/discover), 2025-11-25 back to 2024-11-05 clients initialize as usual; GET ${base}/mcp describes it, ${base}/mcp/server-card is its Server Card`,
    `- A2A 1.0 and 0.3 (JSON-RPC 2.0): POST ${base}/a2a; header A2A-Version: 1.0 for SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask; no header (0.3) for message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe; skills: ${A2A_SKILLS.map((s) => `"${s.examples[0]!.replace(/https:\/\/\S+/, '<server>')}"`).join(', ')}`,
    '',
    '## Endpoints',
    '',
    ...ops.map(line),
    '',
    '## Telemetry',
    '',
    'POST /api/report takes only server_url, success, latency_ms, tool_name and http_status. Prompts, arguments, outputs, user identifiers and IP addresses are never collected.',
    '',
    `OpenTelemetry: OTLP exporters can send to ${base}/v1/traces and ${base}/v1/metrics (OTLP/HTTP, protobuf or JSON, gzip) or to this base URL over OTLP/gRPC. Each MCP client tools/call span (mcp.method.name, gen_ai.tool.name, error.type, span status and duration) and each call counted by the mcp.client.operation.duration histogram becomes one report of the same five fields; nothing else of an export is kept.`,
    '',
    '## Receipts',
    '',
    'Receipts are compact JWS (header.payload.signature), alg EdDSA, verifiable offline against /.well-known/jwks.json or with GET /v1/verify?jws=... . receipt_id is 16 lower-case hex and resolves at /v1/receipt/{receipt_id}.',
    '',
    '## Access',
    '',
    'Everything is free except /agent-query/{server_slug}: use a trial key from POST /agent/auth {"type":"anonymous","requested_credential_type":"api_key"} (50 checks, Authorization: Bearer <key>) or pay 0.001 USDC on Base with x402: v2 clients read the PAYMENT-REQUIRED header of the 402 and pay with PAYMENT-SIGNATURE; v1 clients read the 402 body and pay with X-Payment (GET /api/payment-info says which versions can pay).',
    '',
    '## Optional',
    '',
    `- [OpenAPI 3.1](${base}/openapi.json)`,
    `- [A2A agent card](${base}/.well-known/agent-card.json)`,
    '',
  ].join('\n');
}

const LOGO_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64"><title>Trust Observatory</title>' +
  '<circle cx="32" cy="32" r="30" fill="#1f6feb"/><path d="M19 33l9 9 17-19" fill="none" stroke="#fff" stroke-width="6" stroke-linecap="round" stroke-linejoin="round"/></svg>';

export function discoveryRoutes(app: FastifyInstance, { services, config }: RouteDeps) {
  // A document's JSON text is made once per document object: the OpenAPI document took 0.48 ms of
  // CPU to serialize on every request (2,100 requests/s of one core, for anyone to ask). Documents
  // built once (or cached, as the signed card is) are serialized once, into a Buffer every answer
  // shares: a client that does not read holds no copy of it (a string is copied per answer, src/http/answer-budget.ts).
  const texts = new WeakMap<object, Buffer>();
  const textOf = (doc: object): Buffer => {
    let text = texts.get(doc);
    if (text === undefined) {
      text = Buffer.from(JSON.stringify(doc));
      texts.set(doc, text);
    }
    return text;
  };
  const json = (path: string, build: () => object | Promise<object>) =>
    app.get(path, async (_req, reply) => {
      const text = textOf(await build());
      sharedAnswer(reply.raw);
      return reply.header('cache-control', DISCOVERY_CACHE_CONTROL).type('application/json; charset=utf-8').send(text);
    });
  /** A document that depends only on the configuration: built on first use, then the same object. */
  const once = <T extends object>(build: () => T | Promise<T>): (() => Promise<T>) => {
    let doc: Promise<T> | undefined;
    return () => (doc ??= Promise.resolve(build()));
  };
  // Built once: they depend only on the configuration (the card's signature follows the key ring).
  const cards = agentCardPublisher(config, services.keyring);
  const card = cards.card;
  const openapi = openApiDocument(config);
  const llms = llmsTxt(config);
  json('/.well-known/agent-card.json', () => cards.signed());
  json('/.well-known/agent.json', () => cards.signed());
  json('/.well-known/did.json', async () => didDocument(config, (await services.keyring.jwks()).keys));
  json('/.well-known/mcp.json', once(() => mcpDiscoveryDocument(config)));
  json('/.well-known/ai-plugin.json', once(() => aiPluginManifest(config)));
  json('/.well-known/oauth-protected-resource', once(() => protectedResourceMetadata(config)));
  json('/.well-known/oauth-authorization-server', once(() => authorizationServerMetadata(config)));
  json('/openapi.json', () => openapi);
  // The base URL is the OAuth issuer, the protected resource and the card's provider: it answers
  // with an index of everything else.
  json('/', once(() => ({
    name: 'Trust Observatory',
    version: INTERFACE_VERSION,
    description: card.description,
    documents: {
      openapi: `${config.publicBaseUrl}/openapi.json`,
      llms_txt: `${config.publicBaseUrl}/llms.txt`,
      agent_card: `${config.publicBaseUrl}/.well-known/agent-card.json`,
      mcp: `${config.publicBaseUrl}/mcp`,
      mcp_server_card: `${config.publicBaseUrl}/mcp/server-card`,
      mcp_catalog: `${config.publicBaseUrl}/.well-known/mcp/catalog.json`,
      a2a: `${config.publicBaseUrl}/a2a`,
      jwks: `${config.publicBaseUrl}/.well-known/jwks.json`,
      did: `${config.publicBaseUrl}/.well-known/did.json`,
    },
  })));
  const llmsBytes = Buffer.from(llms);
  app.get('/llms.txt', async (_req, reply) => {
    sharedAnswer(reply.raw);
    return reply.header('cache-control', DISCOVERY_CACHE_CONTROL).type('text/plain; charset=utf-8').send(llmsBytes);
  });
  // Agents and crawlers are welcome everywhere; the pointers help agent-readiness probes (docs/probes.md).
  const robots = `User-agent: *\nAllow: /\n\n# Agent documents: ${config.publicBaseUrl}/llms.txt, ${config.publicBaseUrl}/openapi.json,\n# ${config.publicBaseUrl}/.well-known/mcp.json, ${config.publicBaseUrl}/.well-known/agent-card.json\n# (also at ${config.publicBaseUrl}/.well-known/agent.json for A2A 0.2 clients)\n`;
  app.get('/robots.txt', async (_req, reply) => reply.header('cache-control', DISCOVERY_CACHE_CONTROL).type('text/plain; charset=utf-8').send(robots));
  app.get('/logo.svg', async (_req, reply) => reply.header('cache-control', 'public, max-age=86400').type('image/svg+xml').send(LOGO_SVG));
}
