import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { INTERFACE_VERSION, type Config } from '../config.js';
import type { RouteDeps } from '../http/routes.js';
import { MCP_TOOLS, mcpToolDescriptors } from './mcp-tools.js';
import { createAgentSkills, SkillError, type AgentSkills, type JsonObject } from './skills.js';

// /mcp: an MCP server over Streamable HTTP, stateless (no sessions). Each POST gets its own
// McpServer and transport (construction is a few object allocations; the tool schemas are built
// once, below), so nothing leaks between requests and any instance can answer any request.

export const MCP_SERVER_INFO = { name: 'trust-observatory', title: 'Trust Observatory', version: INTERFACE_VERSION } as const;
const DISCOVERY_CACHE = 'public, max-age=300';
const INSTRUCTIONS =
  'Trust Observatory scores MCP servers on observed runtime behaviour. Call preflight_check (or check_trust) before ' +
  'calling a server: PASS (score >= 60) proceed, UNCERTAIN (40-59) caution, FAIL (< 40) block, UNRATED no evidence. ' +
  'Report the outcome afterwards with POST /api/report. Receipts verify with verify_attestation or offline against /.well-known/jwks.json.';

type Log = Pick<FastifyInstance['log'], 'error'>;

function ok(answer: JsonObject): CallToolResult {
  // The text block carries the same JSON for clients that ignore structuredContent (MCP 2025-06-18).
  return { content: [{ type: 'text', text: JSON.stringify(answer) }], structuredContent: answer };
}

function toolError(message: string): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}

async function run(log: Log, tool: string, fn: () => Promise<JsonObject>): Promise<CallToolResult> {
  try {
    return ok(await fn());
  } catch (err) {
    if (err instanceof SkillError) return toolError(err.message);
    log.error({ err, tool }, 'mcp tool failed');
    return toolError('internal error; retry later');
  }
}

export function buildMcpServer(skills: AgentSkills, log: Log): McpServer {
  const server = new McpServer(MCP_SERVER_INFO, { instructions: INSTRUCTIONS, capabilities: { tools: { listChanged: false } } });
  server.registerTool('preflight_check', MCP_TOOLS.preflight_check, async ({ target }) =>
    run(log, 'preflight_check', () => skills.preflight(target)),
  );
  server.registerTool('check_trust', MCP_TOOLS.check_trust, async ({ server: s }) => run(log, 'check_trust', () => skills.checkTrust(s)));
  server.registerTool('verify_attestation', MCP_TOOLS.verify_attestation, async ({ jws }) =>
    run(log, 'verify_attestation', () => skills.verifyAttestation(jws)),
  );
  return server;
}

/** The JSON document a plain GET of /mcp answers (and /.well-known/mcp.json embeds). */
export function mcpDiscoveryDocument(config: Config) {
  return {
    name: MCP_SERVER_INFO.name,
    title: MCP_SERVER_INFO.title,
    version: INTERFACE_VERSION,
    description: INSTRUCTIONS,
    protocol: 'mcp',
    protocolVersion: LATEST_PROTOCOL_VERSION,
    supportedProtocolVersions: SUPPORTED_PROTOCOL_VERSIONS,
    transport: { type: 'streamable-http', url: `${config.publicBaseUrl}/mcp`, stateless: true, batching: false },
    serverInfo: MCP_SERVER_INFO,
    capabilities: { tools: { listChanged: false } },
    authentication: { required: false },
    tools: TOOL_DESCRIPTORS,
    usage: {
      initialize: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'my-agent', version: '1.0.0' } } },
      call: { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'check_trust', arguments: { server: 'https://weather.example.com/mcp' } } },
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    },
  };
}

const TOOL_DESCRIPTORS = mcpToolDescriptors();

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

export function mcpRoutes(app: FastifyInstance, { services, db, config }: RouteDeps) {
  const skills = createAgentSkills(services, db);
  const allowedHosts = mcpAllowedHosts(config);

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

      reply.hijack();
      // Headers fastify hooks set (request id, interface version, CORS) go out on the raw response.
      for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) reply.raw.setHeader(k, v as string);
      const server = buildMcpServer(skills, req.log);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      reply.raw.on('close', () => {
        void transport.close().catch(() => {});
        void server.close().catch(() => {});
      });
      try {
        await server.connect(transport);
        await transport.handleRequest(req.raw, reply.raw, message);
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
