import * as z from 'zod';
import type { McpToolName } from './mcp-tool-names.js';
import { PreflightRequestSchema } from '../../gen/observatory/v1/trust_pb.js';
import { contractField, maxLength } from '../domain/contract-rules.js';

/** PreflightRequest.target's max_len in proto/observatory/v1/trust.proto (the tool states the contract's rule). */
const TARGET_MAX = maxLength(contractField(PreflightRequestSchema, 'target')) ?? 2048;

// The three MCP tools: names, descriptions and schemas in one place, read by the MCP server
// (src/agents/mcp.ts) and by every discovery document that lists them (/mcp, /.well-known/mcp.json).

const verdict = z.enum(['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED']);
const looseObject = z.looseObject({});

/** What a probe found comparing the server's Server Card with what the server said at runtime. */
const serverCard = z.looseObject({
  card_url: z.string(),
  checked_at: z.string(),
  matches: z.boolean(),
  differences: z.array(z.looseObject({ field: z.string(), claimed: z.string(), observed: z.string(), detail: z.string() })),
});

const trustServer = z.looseObject({
  name: z.string(),
  url: z.string(),
  slug: z.string().optional(),
  category: z.string(),
  trust_score: z.number().min(0).max(100),
  registered_at: z.string(),
  protocol_version: z.string().nullable().optional(),
});

// What the MCP Registry says about the server (RegistryListing in trust.proto); null when unlisted.
const registryListing = z
  .looseObject({
    name: z.string(),
    status: z.enum(['active', 'deprecated', 'deleted']),
    status_message: z.string().nullable(),
    status_changed_at: z.string().nullable(),
    updated_at: z.string().nullable(),
  })
  .nullable()
  .optional();

export const MCP_TOOLS = {
  preflight_check: {
    title: 'Pre-flight trust check',
    description:
      'Call BEFORE using an MCP server. Returns a verdict for the server (PASS >= 60 proceed, UNCERTAIN 40-59 caution, ' +
      'FAIL < 40 block, UNRATED when there is no runtime evidence), its trust score, a recommendation and an ' +
      'Ed25519-signed diligence receipt (compact JWS) verifiable offline against /.well-known/jwks.json. ' +
      'Pre-flight checks are counted as demand only; they never change a score.',
    inputSchema: z.object({
      target: z.string().min(1).max(TARGET_MAX).describe('MCP server URL (e.g. https://weather.example.com/mcp), name or slug'),
    }),
    outputSchema: z.object({
      target: z.string(),
      server_url: z.string().nullable(),
      verdict,
      trust_score: z.number().min(0).max(100).nullable(),
      recommendation: z.string(),
      diligence_receipt: z.string().describe('compact JWS (header.payload.signature)'),
      receipt_id: z.string().regex(/^[0-9a-f]{16}$/),
      checked_at: z.string().optional(),
      // The extra members of PreflightResponse (proto/observatory/v1/trust.proto).
      name: z.string().nullable().optional(),
      tracked: z.boolean().optional(),
      total_interactions: z.number().int().min(0).optional(),
      anomaly_flags: z.array(z.string()).optional(),
      registry: registryListing,
      server_card: serverCard.nullable().optional(),
    }),
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
  },
  check_trust: {
    title: 'Trust record of an MCP server',
    description:
      'Returns the trust record of an MCP server named by URL, name or slug: trust score 0-100 with its verdict ' +
      '(PASS >= 60, UNCERTAIN 40-59, FAIL < 40), observed metrics (interactions, average latency, success rate), the ' +
      'category baseline, anomaly flags and the score breakdown. An untracked server answers found:false with verdict UNRATED.',
    // No length rules here: the trust service refuses malformed input itself, with the same
    // words as GET /api/trust (required, at most 2048 characters, a valid http(s) URL or a name).
    inputSchema: z.object({
      server: z.string().describe('MCP server URL, name or slug (at most 2048 characters)'),
    }),
    outputSchema: z.object({
      found: z.boolean(),
      target: z.string(),
      verdict,
      detail: z.string().optional(),
      server: trustServer.optional(),
      metrics: z
        .looseObject({ total_interactions: z.number().int(), avg_latency_ms: z.number(), success_rate: z.number().nullable() })
        .optional(),
      category_baseline: looseObject.optional(),
      anomaly: z.looseObject({ is_anomalous: z.boolean(), anomaly_flags: z.array(z.string()) }).optional(),
      score_breakdown: looseObject.nullable().optional(),
      registry: registryListing,
      server_card: serverCard.nullable().optional(),
    }),
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
  verify_attestation: {
    title: 'Verify a signed receipt or attestation',
    description:
      'Verifies a compact JWS (header.payload.signature) issued by this observatory (diligence receipt, compliance ' +
      'attestation, ...) against its published Ed25519 keys. Returns valid:true with the decoded header and payload, ' +
      'or valid:false with the reason. Stateless: needs no stored data.',
    inputSchema: z.object({
      jws: z.string().min(1).max(10 * 1024 + 1024).describe('compact JWS: header.payload.signature'),
    }),
    outputSchema: z.object({
      valid: z.boolean(),
      header: looseObject.optional(),
      payload: looseObject.optional(),
      reason: z.string().optional(),
    }),
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
} as const satisfies Record<McpToolName, unknown>;

/** Tool definitions as MCP tools/list shows them (JSON Schema converted the way the SDK does). */
export function mcpToolDescriptors() {
  return Object.entries(MCP_TOOLS).map(([name, t]) => ({
    name,
    title: t.title,
    description: t.description,
    inputSchema: z.toJSONSchema(t.inputSchema, { target: 'draft-7', io: 'input' }),
    outputSchema: z.toJSONSchema(t.outputSchema, { target: 'draft-7', io: 'output' }),
    annotations: t.annotations,
  }));
}
