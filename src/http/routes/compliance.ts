import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  GetAgencyChecklistResponseSchema,
  GetComplianceAttestationResponseSchema,
  GetComplianceExportResponseSchema,
  GetComplianceExportRequestSchema,
  GetAgencyChecklistRequestSchema,
  GetComplianceAttestationRequestSchema,
} from '../../../gen/observatory/v1/compliance_pb.js';
import { invalidArgument } from '../../errors.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson } from '../rest-json.js';
import { callContext } from '../../services/context.js';


type Json = ReturnType<typeof restJson>;

function csvCell(v: unknown): string {
  const s = v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  // Quote always; neutralise spreadsheet formulas (CSV injection) with a leading apostrophe.
  const safe = /^[=+\-@\t\r]/.test(s) ? `'${s}` : s;
  return `"${safe.replace(/"/g, '""')}"`;
}

/** The export as one CSV table: section, key, value rows, so every part fits one download. */
export function complianceCsv(body: Json): string {
  const rows: unknown[][] = [['section', 'key', 'value', 'detail']];
  for (const k of ['schema', 'server_url', 'name', 'agent_id', 'trust_score', 'verdict', 'generated_at', 'notice']) rows.push(['export', k, body[k], '']);
  const period = body.period as Record<string, unknown>;
  rows.push(['period', 'start_date', period.start_date, ''], ['period', 'end_date', period.end_date, '']);
  const events = body.events as Record<string, unknown>;
  for (const [k, v] of Object.entries(events)) if (k !== 'by_tool') rows.push(['events', k, v, '']);
  for (const t of events.by_tool as Record<string, unknown>[]) rows.push(['tool', t.tool_name, t.calls, `failures=${String(t.failures)}`]);
  for (const a of body.anomalies as Record<string, unknown>[]) rows.push(['anomaly', a.flag, a.detected_at, a.description]);
  for (const r of body.receipts as Record<string, unknown>[]) rows.push(['receipt', r.receipt_id, r.issued_at, `kind=${String(r.kind)}${r.verdict ? ` verdict=${String(r.verdict)}` : ''}`]);
  for (const m of body.mappings as Record<string, unknown>[]) rows.push(['mapping', `${String(m.framework)} ${String(m.reference)}`, m.requirement, m.evidence]);
  for (const f of body.data_collected as string[]) rows.push(['data_collected', f, '', '']);
  return rows.map((r) => r.map(csvCell).join(',')).join('\r\n') + '\r\n';
}

function wantsCsv(req: FastifyRequest<{ Querystring: { format?: string } }>): boolean {
  const format = req.query.format;
  if (format !== undefined && format !== '') {
    if (format === 'csv') return true;
    if (format === 'json') return false;
    throw invalidArgument('format must be json or csv');
  }
  const accept = req.headers.accept ?? '';
  return /\btext\/csv\b/i.test(accept) && !/\bapplication\/json\b/i.test(accept.split(',')[0] ?? '');
}

/** Compliance exports, checklist and attestation (SPEC 4.4). */
export function complianceRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { server_url?: string; agent_id?: string; start_date?: string; end_date?: string; format?: string } }>(
    '/api/compliance',
    { schema: { querystring: restQuerySchema(GetComplianceExportRequestSchema, 'format') } },
    async (req, reply) => {
      const csv = wantsCsv(req);
      const q = req.query;
      const body = restJson(
        GetComplianceExportResponseSchema,
        await services.compliance.getComplianceExport({ serverUrl: q.server_url, agentId: q.agent_id, startDate: q.start_date, endDate: q.end_date }, callContext(req.headers, req.ip)),
      );
      // Added to the Vary: Origin every answer carries (src/http/cors.ts), not in its place.
      reply.header('vary', 'Origin, Accept');
      if (!csv) return body;
      const period = body.period as Record<string, string>;
      const file = `compliance-${String(body.server_url).replace(/[^a-z0-9]+/gi, '-').slice(0, 80)}-${period.start_date}-${period.end_date}.csv`;
      reply.header('content-disposition', `attachment; filename="${file}"`);
      return reply.type('text/csv; charset=utf-8').send(complianceCsv(body));
    },
  );
  app.get<{ Querystring: { url?: string } }>('/api/agency-checklist', { schema: { querystring: restQuerySchema(GetAgencyChecklistRequestSchema) } }, async (req) =>
    restJson(GetAgencyChecklistResponseSchema, await services.compliance.getAgencyChecklist({ url: req.query.url }, callContext(req.headers, req.ip))),
  );
  app.get<{ Querystring: { server?: string; standard?: string } }>('/v1/compliance', { schema: { querystring: restQuerySchema(GetComplianceAttestationRequestSchema) } }, async (req) =>
    restJson(GetComplianceAttestationResponseSchema, await services.compliance.getComplianceAttestation({ server: req.query.server, standard: req.query.standard }, callContext(req.headers, req.ip))),
  );
}
