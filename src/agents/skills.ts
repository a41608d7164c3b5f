import { GetTrustResponseSchema, PreflightResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { ObservatoryError, PROBLEMS, type ProblemCode } from '../errors.js';
import { restJson } from '../http/rest-json.js';
import type { Services } from '../services/index.js';
import { EMPTY_CONTEXT } from '../services/context.js';

// The answers the agent interfaces give (MCP tools and A2A skills). Both call these functions,
// which only adapt inputs and outputs: every figure comes from the same service methods the REST
// paths call, and a question the service refuses is refused with the service's own words. Answers
// are the REST JSON bodies (proto field names), so an agent reading /mcp, /a2a or /api/trust sees
// the same keys. No store is read here: adapters go through services.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

/**
 * A question the agent interfaces cannot answer as asked: the caller's input was refused. `code`
 * and `message` are the service's problem code and detail, word for word what REST answers.
 */
export class SkillError extends Error {
  constructor(
    readonly code: ProblemCode,
    message: string,
  ) {
    super(message);
  }

  /** The HTTP status REST answers the same refusal with. */
  get status(): number {
    return PROBLEMS[this.code].status;
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

/** Maps service errors caused by the caller's input to SkillError (same code and detail); anything else propagates. */
function callerError(err: unknown): never {
  if (err instanceof ObservatoryError && err.status < 500) throw new SkillError(err.problem, err.rawMessage);
  throw err;
}

export function createAgentSkills(services: Services): AgentSkills {
  return {

    async checkTrust(server) {
      // The trust service validates and resolves exactly as for GET /api/trust?url=...; only
      // "not tracked" is an answer here (found:false, UNRATED) rather than a refusal.
      try {
        const record = restJson(GetTrustResponseSchema, await services.trust.getTrust({ url: server }, EMPTY_CONTEXT)) as JsonObject;
        const found: JsonObject = { found: true, target: server.trim(), ...record };
        return found;
      } catch (err) {
        if (err instanceof ObservatoryError && err.problem === 'not_tracked') {
          const target = server.trim();
          const untracked: JsonObject = {
            found: false,
            target,
            verdict: 'UNRATED',
            detail: `${target} is not tracked by this observatory: there is no runtime evidence for it yet`,
          };
          return untracked;
        }
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
