// The MCP tool names, without their zod schemas, for documents built at start-up (llms.txt).
// src/agents/mcp-tools.ts defines exactly these tools (checked by the type system).
export const MCP_TOOL_NAMES = ['preflight_check', 'check_trust', 'verify_attestation'] as const;
export type McpToolName = (typeof MCP_TOOL_NAMES)[number];
