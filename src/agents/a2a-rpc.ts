// JSON-RPC pieces both A2A versions share: the error codes (JSON-RPC 2.0 and A2A; the numbers
// are the same in 0.3 and 1.0), the error the method handlers throw, and parameter readers.
import type { A2aErrorKind } from '../services/a2a.js';
import { problemBody, PROBLEMS, type ProblemCode } from '../errors.js';

export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  taskNotFound: -32001,
  taskNotCancelable: -32002,
  pushNotificationNotSupported: -32003,
  unsupportedOperation: -32004,
  contentTypeNotSupported: -32005,
  invalidAgentResponse: -32006,
  extendedAgentCardNotConfigured: -32007,
  extensionSupportRequired: -32008,
  versionNotSupported: -32009,
  /** Implementation-defined (like -32029, "429"): the call's answer does not fit what is left of its HTTP answer ("413"). */
  answerTooLarge: -32013,
} as const;

/** The service's error kinds as JSON-RPC codes. */
export const A2A_ERROR_CODES: Record<A2aErrorKind, number> = {
  task_not_found: RPC.taskNotFound,
  task_not_cancelable: RPC.taskNotCancelable,
  unsupported_operation: RPC.unsupportedOperation,
  content_type_not_supported: RPC.contentTypeNotSupported,
  invalid_params: RPC.invalidParams,
};

/** A2A 1.0 error names (google.rpc.ErrorInfo `reason`) by code. */
export const A2A_ERROR_REASONS: Record<number, string> = {
  [RPC.taskNotFound]: 'TASK_NOT_FOUND',
  [RPC.taskNotCancelable]: 'TASK_NOT_CANCELABLE',
  [RPC.pushNotificationNotSupported]: 'PUSH_NOTIFICATION_NOT_SUPPORTED',
  [RPC.unsupportedOperation]: 'UNSUPPORTED_OPERATION',
  [RPC.contentTypeNotSupported]: 'CONTENT_TYPE_NOT_SUPPORTED',
  [RPC.invalidAgentResponse]: 'INVALID_AGENT_RESPONSE',
  [RPC.extendedAgentCardNotConfigured]: 'EXTENDED_AGENT_CARD_NOT_CONFIGURED',
  [RPC.extensionSupportRequired]: 'EXTENSION_SUPPORT_REQUIRED',
  [RPC.versionNotSupported]: 'VERSION_NOT_SUPPORTED',
};

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

/**
 * A call the service could not serve for a reason of its own that is not a bug: the database is
 * unavailable (REST's 503 `unavailable` with Retry-After), an upstream failed. A2A names JSON-RPC
 * -32603 for system errors (A2A 1.0 section 3.3.2, "Database connection failure"); the problem,
 * its HTTP status and when to retry go in the error's data, in each version's form (a2a-v1.ts,
 * a2a-v03.ts), and on HTTP in the status and Retry-After when the error is the whole answer.
 */
export class ServiceProblemError extends RpcError {
  constructor(
    readonly problem: ProblemCode,
    message: string,
    /** Seconds after which a retry may succeed (REST's Retry-After); undefined: none given. */
    readonly retryAfterSeconds?: number,
  ) {
    super(RPC.internal, message);
  }

  get status(): number {
    return PROBLEMS[this.problem].status;
  }

  /** The problem as REST's problem+json names it: type URI, code, HTTP status, seconds to wait. */
  get detail(): { type: string; code: ProblemCode; status: number; retry_after_seconds?: number } {
    return {
      type: problemBody(this.problem, '').type,
      code: this.problem,
      status: this.status,
      ...(this.retryAfterSeconds !== undefined ? { retry_after_seconds: this.retryAfterSeconds } : {}),
    };
  }
}

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Params = Record<string, unknown>;

export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

export const invalidParams = (message: string) => new RpcError(RPC.invalidParams, message);

/** A member read by its JSON name or, as ProtoJSON parsers also accept, its proto field name. */
export function member(o: Record<string, unknown>, camel: string): unknown {
  if (camel in o) return o[camel];
  const snake = camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  return snake in o ? o[snake] : undefined;
}

export function optionalString(o: Record<string, unknown>, name: string, where: string, max = 256): string | undefined {
  const v = member(o, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.length > max) throw invalidParams(`${where}.${name} must be a string of at most ${max} characters`);
  return v;
}

/** An id the client must give: a non-empty string. */
export function requiredId(o: Record<string, unknown>, name: string, where: string, max = 256): string {
  const v = optionalString(o, name, where, max);
  if (v === undefined || v === '') throw invalidParams(`${where}.${name} is required (a non-empty string)`);
  return v;
}

/** An optional id: absent or a non-empty string ("" counts as absent, as ProtoJSON defaults do). */
export function optionalId(o: Record<string, unknown>, name: string, where: string, max = 256): string | undefined {
  const v = optionalString(o, name, where, max);
  return v === '' ? undefined : v;
}

export function optionalInt(o: Record<string, unknown>, name: string, where: string, min = 0, max = 1_000_000): number | undefined {
  const v = member(o, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidParams(`${where}.${name} must be an integer from ${min} to ${max}`);
  return v;
}

export function optionalBool(o: Record<string, unknown>, name: string, where: string): boolean | undefined {
  const v = member(o, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalidParams(`${where}.${name} must be true or false`);
  return v;
}

export function optionalObject(o: Record<string, unknown>, name: string, where: string): Record<string, unknown> | undefined {
  const v = member(o, name);
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalidParams(`${where}.${name} must be an object`);
  return v;
}

export function optionalStrings(o: Record<string, unknown>, name: string, where: string, maxItems = 32, maxLength = 256): string[] | undefined {
  const v = member(o, name);
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.length > maxItems || !v.every((x) => typeof x === 'string' && x.length <= maxLength)) {
    throw invalidParams(`${where}.${name} must be an array of at most ${maxItems} strings`);
  }
  return v as string[];
}

/** What a method handler may use besides its params. */
/** What is left of one HTTP answer's bytes (A2A_LIMITS.maxAnswerBytes), shared by a batch's calls. */
export interface AnswerBudget {
  left: number;
}

export interface MethodContext {
  /** Aborted when the client goes away (ends subscriptions). */
  signal: AbortSignal;
  /** Bytes the call's answer may still take: methods that return tasks cut them to it. */
  budget?: AnswerBudget;
  /** The caller's address (TRUST_PROXY-aware): its network's share of shared resources (subscriptions). */
  client?: string;
}

/** A method answers once (unary) or with a stream of results (Server-Sent Events). */
export type MethodHandler<S> =
  | { stream: false; run(params: Params | undefined, service: S, ctx: MethodContext): Promise<unknown> }
  | { stream: true; open(params: Params | undefined, service: S, ctx: MethodContext): Promise<AsyncIterable<unknown>> };

/** One protocol version's JSON-RPC methods and its error presentation. */
export interface VersionBinding<S> {
  /** Major.minor, as the A2A-Version header gives it. */
  version: string;
  methods: ReadonlyMap<string, MethodHandler<S>>;
  /** The JSON-RPC error object for an error of this version. */
  errorObject(err: RpcError): { code: number; message: string; data?: unknown };
}
