import type { FastifyInstance } from 'fastify';
import { AgentQueryResponseSchema, GetPaymentInfoResponseSchema, RegisterAgentRequestSchema, RegisterAgentResponseSchema } from '../../../gen/observatory/v1/access_pb.js';
import { restBodySchema, restQuerySchema } from '../contract-schema.js';
import { VerifyReceiptRequestSchema, VerifyReceiptResponseSchema } from '../../../gen/observatory/v1/receipt_pb.js';
import { GetSkillTrustRequestSchema, GetSkillTrustResponseSchema } from '../../../gen/observatory/v1/trust_pb.js';
import { callContext } from '../../services/context.js';
import type { RouteDeps } from '../routes.js';
import { restJson } from '../rest-json.js';

// REST adapters of SPEC 4.5, 4.6, /v1/verify-receipt and /v1/trust: thin calls into the services.

// SPEC 4.6 marks neither member required: each names the only choice offered, so a missing one
// (or a missing body) takes it; any other value breaks the `in` rule of RegisterAgentRequest (400).
const authBody = restBodySchema(RegisterAgentRequestSchema);


export function accessRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.post<{ Body: { type?: string; requested_credential_type?: string } | undefined }>('/agent/auth',
    {
      schema: { body: authBody },
      bodyLimit: 4096,
      // No body at all (curl -X POST) is the empty object: every member takes its default.
      preValidation: (req, _reply, done) => {
        req.body ??= {};
        done();
      },
    },
    async (req) =>
    restJson(
      RegisterAgentResponseSchema,
      await services.access.registerAgent({ type: req.body?.type, requestedCredentialType: req.body?.requested_credential_type }, callContext(req.headers, req.ip)),
    ),
  );

  app.get<{ Params: { server_slug: string } }>('/agent-query/:server_slug', async (req, reply) => {
    const ctx = callContext(req.headers, req.ip);
    const res = await services.access.agentQuery({ serverSlug: req.params.server_slug }, ctx);
    reply.header('cache-control', 'no-store');
    // x402 PAYMENT-RESPONSE of a paid answer.
    ctx.responseHeader?.forEach((value, name) => reply.header(name, value));
    return restJson(AgentQueryResponseSchema, res);
  });

  app.get('/api/payment-info', async (_req, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return restJson(GetPaymentInfoResponseSchema, await services.access.getPaymentInfo());
  });

  app.get<{ Querystring: { id?: string } }>('/v1/verify-receipt', { schema: { querystring: restQuerySchema(VerifyReceiptRequestSchema) } }, async (req) =>
    restJson(VerifyReceiptResponseSchema, await services.verifyReceipt.verifyReceipt({ id: req.query.id })),
  );

  app.get<{ Querystring: { registry?: string; skill?: string } }>('/v1/trust', { schema: { querystring: restQuerySchema(GetSkillTrustRequestSchema) } }, async (req) =>
    restJson(GetSkillTrustResponseSchema, await services.skillTrust.getSkillTrust({ registry: req.query.registry, skill: req.query.skill }, callContext(req.headers, req.ip))),
  );
}
