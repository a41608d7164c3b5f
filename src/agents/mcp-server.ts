import type { FastifyInstance } from 'fastify';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { INTERFACE_VERSION } from '../config.js';
import { MCP_TOOLS, mcpToolDescriptors } from './mcp-tools.js';
import { SkillError, type AgentSkills, type JsonObject } from './skills.js';

// The MCP server proper: loaded on first use by src/agents/mcp.ts, so the SDK and zod (about a
// second of start-up on a busy machine) are not paid by instances that never see an MCP call.

export { StreamableHTTPServerTransport, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS };
export const MCP_SERVER_INFO = { name: 'trust-observatory', title: 'Trust Observatory', version: INTERFACE_VERSION } as const;
export const INSTRUCTIONS =
  'Trust Observatory scores MCP servers on observed runtime behaviour. Call preflight_check (or check_trust) before ' +
  'calling a server: PASS (score >= 60) proceed, UNCERTAIN (40-59) caution, FAIL (< 40) block, UNRATED no evidence. ' +
  'Report the outcome afterwards with POST /api/report. Receipts verify with verify_attestation or offline against /.well-known/jwks.json.';

/** Tool definitions as tools/list shows them, built once. */
export const TOOL_DESCRIPTORS = mcpToolDescriptors();

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
  const server = new McpServer(MCP_SERVER_INFO, { instructions: INSTRUCTIONS });
  server.registerTool('preflight_check', MCP_TOOLS.preflight_check, async ({ target }) =>
    run(log, 'preflight_check', () => skills.preflight(target)),
  );
  server.registerTool('check_trust', MCP_TOOLS.check_trust, async ({ server: s }) => run(log, 'check_trust', () => skills.checkTrust(s)));
  server.registerTool('verify_attestation', MCP_TOOLS.verify_attestation, async ({ jws }) =>
    run(log, 'verify_attestation', () => skills.verifyAttestation(jws)),
  );
  return server;
}
