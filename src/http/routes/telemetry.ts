import type { FastifyInstance } from 'fastify';
import { ReportRequestSchema, ReportResponseSchema } from '../../../gen/observatory/v1/telemetry_pb.js';
import type { RouteDeps } from '../routes.js';
import { restJson } from '../rest-json.js';
import { callContext } from '../../services/context.js';
import { restBodySchema } from '../contract-schema.js';

// The body schema is generated from ReportRequest (src/http/contract-schema.ts): JSON types only,
// additionalProperties:false with ajv's removeAdditional dropping unknown fields (prompts,
// arguments, user ids...) before anything is stored or logged. The value rules are the
// buf.validate annotations of proto/observatory/v1/telemetry.proto, checked by the service.
export const reportBody = restBodySchema(ReportRequestSchema);

export function telemetryRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.post<{ Body: { server_url: string; success: boolean; latency_ms: number; tool_name?: string | null; http_status?: number | null } }>(
    '/api/report',
    { schema: { body: reportBody }, bodyLimit: 16 * 1024 },
    async (req, reply) => {
      const b = req.body;
      // With reply.raw, a report whose client leaves before its write begins is not written.
      const res = await services.telemetry.report({
        serverUrl: b.server_url,
        success: b.success,
        latencyMs: b.latency_ms,
        toolName: b.tool_name ?? undefined,
        httpStatus: b.http_status ?? undefined,
      }, callContext(req.headers, req.ip, reply.raw));
      return restJson(ReportResponseSchema, res);
    },
  );
}
