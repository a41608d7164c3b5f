import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../domain/json-depth.js';
import type { Config } from '../config.js';
import { buildCatalog, buildServerCard, SERVER_CARD_MEDIA_TYPE } from '../domain/server-card.js';
import type { RouteDeps } from '../http/routes.js';
import { createAgentSkills } from './skills.js';
import { refuseMcpCallOverLimit } from './rate-limit.js';

// /mcp: an MCP server over Streamable HTTP, stateless (no sessions), on the v2 SDK. MCP 2026-07-28
// clients talk to it with no initialize; clients of 2025-11-25 back to 2024-11-05 initialize as
// before, on the same path (mcp-server.ts). Each POST gets its own McpServer and transport
// (construction is a few object allocations; the tool schemas are built once), so nothing leaks
// between requests and any instance can answer any request.

const DISCOVERY_CACHE = 'public, max-age=300';

let runtime: Promise<typeof import('./mcp-server.js')> | null = null;
/** The SDK-backed part, imported on first use (see mcp-server.ts). */
export function mcpRuntime(): Promise<typeof import('./mcp-server.js')> {
  runtime ??= import('./mcp-server.js');
  return runtime;
}

/** The JSON document a plain GET of /mcp answers (and /.well-known/mcp.json embeds). */
export async function mcpDiscoveryDocument(config: Config) {
  const { MCP_SERVER_INFO, INSTRUCTIONS, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, LEGACY_PROTOCOL_VERSIONS, TOOL_DESCRIPTORS } = await mcpRuntime();
  const meta = {
    'io.modelcontextprotocol/protocolVersion': LATEST_PROTOCOL_VERSION,
    'io.modelcontextprotocol/clientInfo': { name: 'my-agent', version: '1.0.0' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
  const modernHeaders = (method: string, name?: string) => ({
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    'MCP-Protocol-Version': LATEST_PROTOCOL_VERSION,
    'Mcp-Method': method,
    ...(name ? { 'Mcp-Name': name } : {}),
  });
  return {
    name: MCP_SERVER_INFO.name,
    title: MCP_SERVER_INFO.title,
    version: MCP_SERVER_INFO.version,
    description: INSTRUCTIONS,
    protocol: 'mcp',
    protocolVersion: LATEST_PROTOCOL_VERSION,
    supportedProtocolVersions: SUPPORTED_PROTOCOL_VERSIONS,
    transport: { type: 'streamable-http', url: `${config.publicBaseUrl}/mcp`, stateless: true, batching: false },
    serverInfo: MCP_SERVER_INFO,
    capabilities: { tools: {} },
    authentication: { required: false },
    serverCard: `${config.publicBaseUrl}/mcp/server-card`,
    tools: TOOL_DESCRIPTORS,
    usage: {
      // MCP 2026-07-28: no handshake; every request carries the envelope in _meta and the headers.
      discover: { headers: modernHeaders('server/discover'), body: { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta } } },
      call: {
        headers: modernHeaders('tools/call', 'check_trust'),
        body: { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'check_trust', arguments: { server: 'https://weather.example.com/mcp' }, _meta: meta } },
      },
      // Earlier revisions: initialize first, then the call (stateless: no session id to keep).
      legacy: {
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
        initialize: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: LEGACY_PROTOCOL_VERSIONS[0], capabilities: {}, clientInfo: { name: 'my-agent', version: '1.0.0' } } },
        call: { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'check_trust', arguments: { server: 'https://weather.example.com/mcp' } } },
      },
    },
  };
}

const CARD_DESCRIPTION = 'Runtime trust scores, signed pre-flight receipts and drift checks for MCP servers';

/**
 * Our MCP Server Card (SEP-2127 draft shape, docs/agents.md "Server Card"): identity, the /mcp
 * endpoint and every protocol revision it speaks, built from the same constants /mcp answers with.
 */
export async function mcpServerCard(config: Config) {
  const { MCP_SERVER_INFO, SUPPORTED_PROTOCOL_VERSIONS } = await mcpRuntime();
  return buildServerCard({
    publicBaseUrl: config.publicBaseUrl,
    name: MCP_SERVER_INFO.name,
    title: MCP_SERVER_INFO.title,
    version: MCP_SERVER_INFO.version,
    description: CARD_DESCRIPTION,
    protocolVersions: SUPPORTED_PROTOCOL_VERSIONS,
  });
}

/** The MCP Catalog at /.well-known/mcp/catalog.json: one entry, our card. */
export async function mcpCatalog(config: Config) {
  const card = await mcpServerCard(config);
  return buildCatalog({ publicBaseUrl: config.publicBaseUrl, cardName: card.name, displayName: card.title });
}

const LOOPBACK_BINDS = new Set(['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1']);

/**
 * Host names accepted on /mcp when the service listens on a loopback address (DNS-rebinding
 * protection, MCP transport security); null when it listens on a routable address.
 */
export function mcpAllowedHosts(config: Config): string[] | null {
  if (!LOOPBACK_BINDS.has(config.host) && !config.host.startsWith('127.')) return null;
  const hosts = new Set(['localhost', '127.0.0.1', '[::1]']);
  hosts.add(new URL(config.publicBaseUrl).hostname);
  return [...hosts];
}

function jsonRpcError(reply: FastifyReply, status: number, code: number, message: string) {
  return reply.code(status).type('application/json').send({ jsonrpc: '2.0', id: null, error: { code, message } });
}

export function mcpRoutes(app: FastifyInstance, { services, config }: RouteDeps) {
  // Server Card documents: public metadata, cached like the other discovery documents.
  const card = (reply: FastifyReply) => {
    reply.header('cache-control', DISCOVERY_CACHE).type(SERVER_CARD_MEDIA_TYPE);
    return mcpServerCard(config);
  };
  // Where some frameworks still serve the card, and the MCP Catalog pointing at /mcp/server-card.
  app.get('/.well-known/mcp/server-card.json', async (_req, reply) => card(reply));
  app.get('/.well-known/mcp/catalog.json', async (_req, reply) => {
    reply.header('cache-control', DISCOVERY_CACHE);
    return mcpCatalog(config);
  });

  const skills = createAgentSkills(services);
  const allowedHosts = mcpAllowedHosts(config);
  let handler: Promise<import('./mcp-server.js').McpHttpHandler> | null = null;
  const httpHandler = () =>
    (handler ??= mcpRuntime().then(({ buildMcpServer, createMcpHttpHandler }) => createMcpHttpHandler(() => buildMcpServer(skills, app.log), app.log)));
  app.addHook('onClose', async () => {
    if (handler) await (await handler).close();
  });

  void app.register(async (scope) => {
    // Raw text in, so a malformed body is a JSON-RPC parse error (-32700) rather than a REST
    // problem; fastify still enforces the body limit (413 problem+json) and Content-Type (415).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => done(null, body));

    if (allowedHosts) {
      scope.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
        const host = req.headers.host;
        let hostname: string | null = null;
        try {
          hostname = host ? new URL(`http://${host}`).hostname : null;
        } catch {
          hostname = null;
        }
        if (!hostname || !allowedHosts.includes(hostname)) {
          return jsonRpcError(reply, 403, -32000, `Forbidden: Host ${JSON.stringify(host ?? '')} is not allowed (DNS-rebinding protection)`);
        }
      });
    }

    scope.get('/mcp', async (req, reply) => {
      const accept = String(req.headers.accept ?? '');
      if (accept.includes('text/event-stream')) {
        // Stateless server: no server-initiated stream to offer (MCP transport spec: 405).
        reply.header('allow', 'GET, POST');
        return jsonRpcError(reply, 405, -32000, 'Method not allowed: this stateless server offers no SSE stream; POST JSON-RPC messages to /mcp');
      }
      reply.header('cache-control', DISCOVERY_CACHE);
      return mcpDiscoveryDocument(config);
    });

    // Server Card at the location SEP-2127 reserves (<mcp-url>/server-card); the well-known
    // copies are registered beside the other discovery documents, below.
    scope.get('/mcp/server-card', async (_req, reply) => card(reply));

    scope.post('/mcp', async (req, reply) => {
      let message: unknown;
      try {
        message = JSON.parse(String(req.body ?? ''));
      } catch {
        return jsonRpcError(reply, 400, -32700, 'Parse error: the body is not valid JSON');
      }
      if (Array.isArray(message)) {
        // MCP 2025-06-18 removed JSON-RPC batching: one message per POST.
        return jsonRpcError(reply, 400, -32600, 'Invalid Request: JSON-RPC batches are not supported; send one message per POST');
      }
      if (message === null || typeof message !== 'object') {
        return jsonRpcError(reply, 400, -32600, 'Invalid Request: the body must be a JSON-RPC message object');
      }
      if (nestedDeeperThan(message, MAX_JSON_DEPTH)) {
        return jsonRpcError(reply, 400, -32600, `Invalid Request: the message nests deeper than ${MAX_JSON_DEPTH} levels`);
      }
      // preflight_check signs and stores a receipt per call: a per-client limit of its own.
      if (refuseMcpCallOverLimit(reply, services.limits, message, req.ip)) return reply;

      const { handle } = await httpHandler();
      reply.hijack();
      // Headers fastify hooks set (request id, interface version, CORS) go out on the raw response.
      for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) reply.raw.setHeader(k, v as string);
      try {
        await handle(req.raw, reply.raw, message);
      } catch (err) {
        req.log.error({ err }, 'mcp request failed');
        if (!reply.raw.headersSent) {
          reply.raw.writeHead(500, { 'content-type': 'application/json' });
          reply.raw.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'Internal error' } }));
        }
      }
    });
  });
}
