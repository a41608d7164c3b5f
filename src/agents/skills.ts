import { GetTrustResponseSchema, PreflightResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import type { Db } from '../db/index.js';
import { ObservatoryError } from '../errors.js';
import { restJson } from '../http/rest-json.js';
import type { Services } from '../services/index.js';
import { EMPTY_CONTEXT } from '../services/context.js';
import { serverStore } from '../store/servers.js';

// The answers the agent interfaces give (MCP tools and A2A skills). Both call these functions,
// which only adapt inputs and outputs: every figure comes from the same service methods the REST
// paths call. Answers are the REST JSON bodies (proto field names), so an agent reading /mcp,
// /a2a or /api/trust sees the same keys.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

/** A question the agent interfaces cannot answer as asked: bad input, or a capability not built yet. */
export class SkillError extends Error {
  constructor(
    readonly code: 'invalid_argument',
    message: string,
  ) {
    super(message);
  }
}

export interface AgentSkills {
  /** Trust record of a server named by URL, name or slug; `found:false` + UNRATED when untracked. */
  checkTrust(server: string): Promise<JsonObject>;
  /** Pre-flight verdict with a signed diligence receipt (same as GET /v1/preflight). */
  preflight(target: string): Promise<JsonObject>;
  /** Stateless verification of a compact JWS against our JWKS (same as GET /v1/verify). */
  verifyAttestation(jws: string): Promise<JsonObject>;
}

/** Maps service errors caused by the caller's input to SkillError; anything else propagates. */
function callerError(err: unknown): never {
  if (err instanceof ObservatoryError && err.status < 500) throw new SkillError('invalid_argument', err.rawMessage);
  throw err;
}

export function createAgentSkills(services: Services, db: Db): AgentSkills {
  const servers = serverStore(db);

  return {

    async checkTrust(server) {
      const target = server.trim();
      if (target === '') throw new SkillError('invalid_argument', 'server is required (a URL, name or slug)');
      const row = await servers.resolve(target);
      if (!row) {
        const untracked: JsonObject = {
          found: false,
          target,
          verdict: 'UNRATED',
          detail: `${target} is not tracked by this observatory: there is no runtime evidence for it yet`,
        };
        return untracked;
      }
      try {
        const record = restJson(GetTrustResponseSchema, await services.trust.getTrust({ url: row.url }, EMPTY_CONTEXT)) as JsonObject;
        const found: JsonObject = { found: true, target, ...record };
        return found;
      } catch (err) {
        return callerError(err);
      }
    },

    async preflight(target) {
      const t = target.trim();
      if (t === '') throw new SkillError('invalid_argument', 'target is required (an MCP server URL or name)');
      try {
        return restJson(PreflightResponseSchema, await services.preflight.preflight({ target: t }, EMPTY_CONTEXT)) as JsonObject;
      } catch (err) {
        return callerError(err);
      }
    },

    async verifyAttestation(jws) {
      const outcome = await services.receipts.verify(jws.trim());
      const answer: JsonObject = outcome.valid
        ? { valid: true, header: outcome.header as JsonObject, payload: outcome.payload as JsonObject }
        : { valid: false, reason: outcome.reason };
      return answer;
    },
  };
}
