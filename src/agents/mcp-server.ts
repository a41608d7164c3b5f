import type { FastifyInstance } from 'fastify';
import { toNodeHandler, type NodeMcpRequestHandler } from '@modelcontextprotocol/node';
import {
  createMcpHandler,
  isLegacyRequest,
  McpServer,
  SUPPORTED_PROTOCOL_VERSIONS as SDK_LEGACY_PROTOCOL_VERSIONS,
  WebStandardStreamableHTTPServerTransport,
  type CallToolResult,
  type McpHandlerRequestOptions,
} from '@modelcontextprotocol/server';
import { INTERFACE_VERSION } from '../config.js';
import { MCP_TOOLS, mcpToolDescriptors } from './mcp-tools.js';
import { SkillError, type AgentSkills, type JsonObject } from './skills.js';
import { logFailure, problemFromError } from '../http/problem.js';
import { PROBLEMS } from '../errors.js';

// The MCP server proper, on the official v2 SDK (@modelcontextprotocol/server): loaded on first
// use by src/agents/mcp.ts, so the SDK and zod (about a second of start-up on a busy machine) are
// not paid by instances that never see an MCP call.
//
// One factory backs both eras on the same path (docs/agents.md "MCP protocol versions"):
// - MCP 2026-07-28 (stateless: no initialize; `_meta` envelope, server/discover, Mcp-Method and
//   Mcp-Name headers, errors -32020 and -32022) through the SDK's createMcpHandler;
// - every earlier revision (initialize handshake) through a stateless Streamable HTTP transport
//   per request that answers plain JSON, as /mcp always has (curl-friendly, no SSE framing).

/** The revisions of the 2026 era served (negotiated with server/discover). */
export const MODERN_PROTOCOL_VERSIONS = ['2026-07-28'] as const;
/** The 2025-era revisions served with initialize (the SDK's list, newest first). */
export const LEGACY_PROTOCOL_VERSIONS: readonly string[] = [...SDK_LEGACY_PROTOCOL_VERSIONS];
/** Every revision /mcp speaks, newest first. */
export const SUPPORTED_PROTOCOL_VERSIONS: readonly string[] = [...MODERN_PROTOCOL_VERSIONS, ...LEGACY_PROTOCOL_VERSIONS];
export const LATEST_PROTOCOL_VERSION = MODERN_PROTOCOL_VERSIONS[0];

export const MCP_SERVER_INFO = { name: 'trust-observatory', title: 'Trust Observatory', version: INTERFACE_VERSION } as const;
export const INSTRUCTIONS =
  'Trust Observatory scores MCP servers on observed runtime behaviour. Call preflight_check (or check_trust) before ' +
  'calling a server: PASS (score >= 60) proceed, UNCERTAIN (40-59) caution, FAIL (< 40) block, UNRATED no evidence. ' +
  'Report the outcome afterwards with POST /api/report. Receipts verify with verify_attestation or offline against /.well-known/jwks.json.';

/** Tool definitions as tools/list shows them, built once. */
export const TOOL_DESCRIPTORS = mcpToolDescriptors();

/** The tool list and discovery answer change only with a release: clients may cache them (2026-07-28 cache hints). */
const LIST_CACHE_HINT = { ttlMs: 300_000, cacheScope: 'public' } as const;

/** `_meta` key of a refused tool call: the service's problem code and HTTP status, beside the detail text. */
export const PROBLEM_META_KEY = 'dev.trust-observatory/problem';

type Log = Pick<FastifyInstance['log'], 'error' | 'warn'>;

function ok(answer: JsonObject): CallToolResult {
  // The text block carries the same JSON for clients that ignore structuredContent (MCP 2025-06-18).
  return { content: [{ type: 'text', text: JSON.stringify(answer) }], structuredContent: answer };
}

function toolError(message: string, problem?: { code: string; status: number }): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true, ...(problem ? { _meta: { [PROBLEM_META_KEY]: problem } } : {}) };
}

async function run(log: Log, tool: string, fn: () => Promise<JsonObject>): Promise<CallToolResult> {
  try {
    return ok(await fn());
  } catch (err) {
    // A refusal reads exactly as REST's problem detail, with its code (e.g. GET /api/trust's 400).
    if (err instanceof SkillError) return toolError(err.message, { code: err.code, status: err.status });
    // What the service could not do reads as REST's answer would: a lost database is
    // `unavailable` (503, logged once a second), anything else an internal error.
    const p = problemFromError(err);
    logFailure(log, err, p.code, { tool });
    if (p.code === 'unavailable') return toolError(p.detail, { code: p.code, status: PROBLEMS[p.code].status });
    return toolError('internal error; retry later');
  }
}

export function buildMcpServer(skills: AgentSkills, log: Log): McpServer {
  const server = new McpServer(MCP_SERVER_INFO, {
    instructions: INSTRUCTIONS,
    // The three tools are fixed for a release: no notifications/tools/list_changed ever comes.
    capabilities: { tools: { listChanged: false } },
    supportedProtocolVersions: [...SUPPORTED_PROTOCOL_VERSIONS],
    cacheHints: { 'tools/list': LIST_CACHE_HINT, 'server/discover': LIST_CACHE_HINT },
  });
  server.registerTool('preflight_check', MCP_TOOLS.preflight_check, async ({ target }) =>
    run(log, 'preflight_check', () => skills.preflight(target)),
  );
  server.registerTool('check_trust', MCP_TOOLS.check_trust, async ({ server: s }) => run(log, 'check_trust', () => skills.checkTrust(s)));
  server.registerTool('verify_attestation', MCP_TOOLS.verify_attestation, async ({ jws }) =>
    run(log, 'verify_attestation', () => skills.verifyAttestation(jws)),
  );
  return server;
}

export interface McpHttpHandler {
  /** Serves one POST /mcp whose body was already parsed (fastify read it under its body limit). */
  handle: NodeMcpRequestHandler;
  close(): Promise<void>;
}

/**
 * The /mcp POST handler: each request is classified by the SDK (isLegacyRequest, the same code
 * createMcpHandler routes with) and answered by a fresh server from `factory`, so nothing is shared
 * between requests and any instance can answer any request.
 */
export function createMcpHttpHandler(factory: () => McpServer, log: Log): McpHttpHandler {
  const onerror = (err: Error) => log.error({ err }, 'mcp request failed');
  // 2026-07-28: the SDK's entry, strict (legacy traffic never reaches it). Our tools send no
  // progress or log messages, so every answer is plain JSON ('auto' would upgrade to SSE only then).
  const modern = createMcpHandler(factory, { legacy: 'reject', responseMode: 'auto', onerror });

  // 2025 era: a stateless Streamable HTTP transport per request, JSON responses (no SSE framing).
  async function legacy(request: Request, opts?: McpHandlerRequestOptions): Promise<Response> {
    const server = factory();
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    try {
      await server.connect(transport);
      return await transport.handleRequest(request, opts?.parsedBody !== undefined ? { parsedBody: opts.parsedBody } : {});
    } finally {
      void transport.close().catch(() => {});
      void server.close().catch(() => {});
    }
  }

  const handle = toNodeHandler(
    {
      fetch: async (request, opts) => ((await isLegacyRequest(request, opts?.parsedBody)) ? legacy(request, opts) : modern.fetch(request, opts)),
    },
    { onerror },
  );
  return { handle, close: () => modern.close() };
}
