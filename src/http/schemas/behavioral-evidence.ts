// JSON Schema (draft 2020-12) of the behavioral evidence document (SPEC 2.3, schema identifier
// mcp-behavioral-evidence-v1.0), served at a stable URL so consumers can validate what they get.

export const BEHAVIORAL_EVIDENCE_SCHEMA_PATH = '/schemas/mcp-behavioral-evidence-v1.0.json';

const nullableNumber = (description: string, extra: Record<string, unknown> = {}) => ({ type: ['number', 'null'], description, ...extra });

export function behavioralEvidenceJsonSchema(publicBaseUrl: string) {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: `${publicBaseUrl}${BEHAVIORAL_EVIDENCE_SCHEMA_PATH}`,
    title: 'MCP behavioral evidence v1.0',
    description:
      'Runtime behaviour of an MCP server as observed by a Trust Observatory, compatible with the A2A evidence_ref format. `attestation` is this document signed as an Ed25519 compact JWS (verify against the observer\'s /.well-known/jwks.json).',
    type: 'object',
    required: ['schema', 'server_url', 'observed_at', 'observer', 'found', 'behavioral_summary'],
    properties: {
      schema: { const: 'mcp-behavioral-evidence-v1.0' },
      server_url: { type: 'string', format: 'uri', description: 'Canonical server URL' },
      observed_at: { type: 'string', format: 'date-time' },
      observer: { type: 'string', description: 'Observer identity (its public base URL)' },
      found: { type: 'boolean', description: 'Whether the observer tracks the server' },
      trust_score: nullableNumber('Trust score 0 to 100; null when not found or without evidence', { minimum: 0, maximum: 100 }),
      verdict: { type: ['string', 'null'], enum: ['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED', null] },
      behavioral_summary: {
        type: 'object',
        description: 'Observed behaviour; for a server the observer does not track (found: false) the figures are 0, null and empty',
        required: ['total_interactions', 'success_rate', 'avg_latency_ms', 'p95_latency_ms', 'last_observed', 'category', 'anomaly_flags'],
        properties: {
          total_interactions: { type: 'integer', minimum: 0 },
          success_rate: nullableNumber('Successes / count, 0 to 1', { minimum: 0, maximum: 1 }),
          avg_latency_ms: nullableNumber('Mean latency in ms', { minimum: 0 }),
          p95_latency_ms: nullableNumber('95th percentile latency in ms', { minimum: 0 }),
          last_observed: { type: ['string', 'null'], format: 'date-time' },
          category: { type: 'string' },
          anomaly_flags: { type: 'array', items: { type: 'string' } },
        },
      },
      receipt_id: { type: ['string', 'null'], pattern: '^[0-9a-f]{16}$' },
      attestation: { type: ['string', 'null'], description: 'This document signed as a compact JWS (EdDSA)' },
    },
  };
}
