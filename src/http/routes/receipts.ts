import type { FastifyInstance } from 'fastify';
import {
  GetBehavioralEvidenceResponseSchema,
  GetErc8004AttestationResponseSchema,
  GetReceiptResponseSchema,
  VerifyResponseSchema,
  VerifyRequestSchema,
  GetBehavioralEvidenceRequestSchema,
  GetErc8004AttestationRequestSchema,
} from '../../../gen/observatory/v1/receipt_pb.js';
import type { RouteDeps } from '../routes.js';
import { restQuerySchema } from '../contract-schema.js';
import { restJson } from '../rest-json.js';
import { behavioralEvidenceJsonSchema, BEHAVIORAL_EVIDENCE_SCHEMA_PATH } from '../schemas/behavioral-evidence.js';


export function receiptRoutes(app: FastifyInstance, { services, config }: RouteDeps) {
  app.get<{ Params: { receipt_id: string } }>('/v1/receipt/:receipt_id', async (req) =>
    restJson(GetReceiptResponseSchema, await services.receipt.getReceipt({ receiptId: req.params.receipt_id })),
  );
  app.get<{ Querystring: { jws?: string } }>('/v1/verify', { schema: { querystring: restQuerySchema(VerifyRequestSchema) } }, async (req) =>
    restJson(VerifyResponseSchema, await services.receipt.verify({ jws: req.query.jws })),
  );
  app.get<{ Querystring: { url?: string } }>('/v1/behavioral-evidence', { schema: { querystring: restQuerySchema(GetBehavioralEvidenceRequestSchema) } }, async (req) =>
    restJson(GetBehavioralEvidenceResponseSchema, await services.receipt.getBehavioralEvidence({ url: req.query.url })),
  );
  app.get<{ Querystring: { url?: string } }>('/v1/erc8004-attestation', { schema: { querystring: restQuerySchema(GetErc8004AttestationRequestSchema) } }, async (req) =>
    restJson(GetErc8004AttestationResponseSchema, await services.receipt.getErc8004Attestation({ url: req.query.url })),
  );
  const schemaDoc = behavioralEvidenceJsonSchema(config.publicBaseUrl);
  app.get(BEHAVIORAL_EVIDENCE_SCHEMA_PATH, async (_req, reply) => {
    reply.header('cache-control', 'public, max-age=3600').type('application/schema+json');
    return schemaDoc;
  });
}
