import type { FastifyReply } from 'fastify';
import { rateLimitHeaders, rateLimitMessage, type RateDecision, type RateLimiter } from '../services/rate-limits.js';

// Per-call rate limits of the agent doors (docs/reliability.md "Rate limits"). MCP and A2A are
// JSON-RPC: one HTTP request can carry one tool call (MCP) or up to 50 skill invocations (an A2A
// batch), so a limit counts calls, not requests, and a refusal is the protocol's own error:
//   - a JSON-RPC error, code JSONRPC_RATE_LIMITED, with a message that says so and
//     data {retry_after_seconds, limit, window_seconds};
//   - on HTTP, when the whole answer is that one refusal, status 429 with Retry-After (stock MCP
//     and A2A clients show the JSON-RPC message of a non-2xx answer); inside an A2A batch the
//     refused calls get the error and the others their results (status 200, Retry-After set).
// Answers to limited calls carry RateLimit / RateLimit-Policy headers like the REST routes.

/** JSON-RPC error code of a refused call: implementation-defined server error range, "429". */
export const JSONRPC_RATE_LIMITED = -32029;

export interface RateLimitedRpcError {
  code: typeof JSONRPC_RATE_LIMITED;
  message: string;
  data: { retry_after_seconds: number; limit: number; window_seconds: number; policy: string };
}

export function rateLimitedRpcError(d: RateDecision): RateLimitedRpcError {
  return {
    code: JSONRPC_RATE_LIMITED,
    message: rateLimitMessage(d),
    data: { retry_after_seconds: d.retryAfterSeconds, limit: d.policy.quota, window_seconds: d.policy.windowSeconds, policy: d.policy.name },
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** True for an MCP `tools/call` of `preflight_check` (the tool that signs and stores a receipt). */
export function isMcpPreflightCall(message: unknown): boolean {
  return isObject(message) && message.method === 'tools/call' && isObject(message.params) && message.params.name === 'preflight_check';
}

/**
 * The MCP door's limit, for one JSON-RPC message (MCP takes one per POST): a `preflight_check`
 * call takes a token from the client's `mcp_preflight` bucket. Sets the RateLimit headers; over
 * the limit it answers 429 + Retry-After + the JSON-RPC error and returns true (the caller stops).
 */
export function refuseMcpCallOverLimit(reply: FastifyReply, limits: RateLimiter, message: unknown, clientAddress: string | undefined): boolean {
  if (!isMcpPreflightCall(message)) return false;
  const d = limits.take('mcp_preflight', clientAddress);
  if (!d) return false;
  reply.headers(rateLimitHeaders(d));
  if (d.allowed) return false;
  const id = isObject(message) && (typeof message.id === 'string' || typeof message.id === 'number') ? message.id : null;
  void reply.code(429).type('application/json').send({ jsonrpc: '2.0', id, error: rateLimitedRpcError(d) });
  return true;
}

/**
 * What one skill invocation is counted as against A2A_TASK_BYTES_PER_CLIENT_PER_DAY besides the
 * JSON of its params (the message, kept in the task's history): the answer stored with it (the
 * agent's status message and the skill's artifact, about 2-3 KB for a trust record).
 */
export const A2A_ANSWER_BYTES = 4096;

/**
 * The A2A door's limits, per HTTP request: `take(paramsBytes)` counts one skill invocation of the
 * client against its `a2a_skills` bucket and what it will store (`paramsBytes` + A2A_ANSWER_BYTES)
 * against its `a2a_task_bytes` allowance, and returns the JSON-RPC error when either refuses;
 * `read()` counts one task read against `a2a_reads` (each reads a stored task, up to
 * A2A_LIMITS.maxAnswerBytes of it, or a page of them);
 * `finish()` sets the headers and the status of the answer (429 when the answer is that single
 * refusal).
 */
export function a2aSkillLimit(limits: RateLimiter, clientAddress: string | undefined) {
  let last: RateDecision | null = null;
  let refused = 0;
  let retryAfter = 0;
  const refuse = (d: RateDecision): RateLimitedRpcError => {
    last = d;
    refused++;
    retryAfter = Math.max(retryAfter, d.retryAfterSeconds);
    return rateLimitedRpcError(d);
  };
  return {
    take(paramsBytes: number): RateLimitedRpcError | null {
      const calls = limits.take('a2a_skills', clientAddress);
      if (calls && !calls.allowed) return refuse(calls);
      const bytes = limits.take('a2a_task_bytes', clientAddress, paramsBytes + A2A_ANSWER_BYTES);
      if (bytes && !bytes.allowed) return refuse(bytes);
      // The headers name the per-minute limit while the allowance lasts.
      last = calls ?? bytes ?? last;
      return null;
    },
    /** Counts one task read (GetTask, ListTasks, CancelTask, SubscribeToTask) against `a2a_reads`. */
    read(): RateLimitedRpcError | null {
      const d = limits.take('a2a_reads', clientAddress);
      if (d && !d.allowed) return refuse(d);
      last = last ?? d;
      return null;
    },
    finish(reply: FastifyReply, answer: unknown): void {
      if (!last) return;
      reply.headers(rateLimitHeaders(last));
      if (refused === 0) return;
      reply.header('retry-after', String(retryAfter));
      const single = isObject(answer) && isObject(answer.error) && answer.error.code === JSONRPC_RATE_LIMITED;
      if (single) void reply.code(429);
    },
  };
}
