import type { FastifyInstance } from 'fastify';
import { ReportResponseSchema } from '../../../gen/observatory/v1/telemetry_pb.js';
import { REPORT_LIMITS } from '../../domain/telemetry.js';
import type { RouteDeps } from '../routes.js';
import { restJson } from '../rest-json.js';
import { callContext } from '../../services/context.js';

// The JSON schema checks types at the edge; value rules live in domain/telemetry.ts (shared with
// Connect). additionalProperties:false with ajv's removeAdditional drops unknown fields (prompts,
// arguments, user ids...) before anything is stored or logged.
export const reportBody = {
  type: 'object',
  additionalProperties: false,
  required: ['server_url', 'success', 'latency_ms'],
  properties: {
    server_url: { type: 'string', minLength: 1, maxLength: REPORT_LIMITS.serverUrlMaxLength },
    success: { type: 'boolean' },
    latency_ms: { type: 'number', minimum: 0, maximum: REPORT_LIMITS.latencyMaxMs },
    tool_name: { type: ['string', 'null'], maxLength: REPORT_LIMITS.toolNameMaxLength },
    http_status: { type: ['integer', 'null'], minimum: REPORT_LIMITS.httpStatusMin, maximum: REPORT_LIMITS.httpStatusMax },
  },
} as const;

export function telemetryRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.post<{ Body: { server_url: string; success: boolean; latency_ms: number; tool_name?: string | null; http_status?: number | null } }>(
    '/api/report',
    { schema: { body: reportBody }, bodyLimit: 16 * 1024 },
    async (req) => {
      const b = req.body;
      const res = await services.telemetry.report({
        serverUrl: b.server_url,
        success: b.success,
        latencyMs: b.latency_ms,
        toolName: b.tool_name ?? undefined,
        httpStatus: b.http_status ?? undefined,
      }, callContext(req.headers, req.ip));
      return restJson(ReportResponseSchema, res);
    },
  );
}
