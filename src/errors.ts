import { Code, ConnectError } from '@connectrpc/connect';

// One mapping table for every error the service raises: a stable snake_case problem code,
// the Connect/gRPC Code, and the HTTP status REST answers with (RFC 9457 problem details).
export const PROBLEMS = {
  invalid_argument: { code: Code.InvalidArgument, status: 400, title: 'Invalid argument' },
  target_refused: { code: Code.InvalidArgument, status: 400, title: 'Target refused' },
  unauthenticated: { code: Code.Unauthenticated, status: 401, title: 'Unauthenticated' },
  payment_required: { code: Code.FailedPrecondition, status: 402, title: 'Payment required' },
  forbidden: { code: Code.PermissionDenied, status: 403, title: 'Forbidden' },
  not_found: { code: Code.NotFound, status: 404, title: 'Not found' },
  not_tracked: { code: Code.NotFound, status: 404, title: 'Server not tracked' },
  method_not_allowed: { code: Code.Unimplemented, status: 405, title: 'Method not allowed' },
  not_acceptable: { code: Code.InvalidArgument, status: 406, title: 'Not acceptable' },
  request_timeout: { code: Code.DeadlineExceeded, status: 408, title: 'Request timeout' },
  conflict: { code: Code.AlreadyExists, status: 409, title: 'Conflict' },
  payload_too_large: { code: Code.ResourceExhausted, status: 413, title: 'Payload too large' },
  unsupported_media_type: { code: Code.InvalidArgument, status: 415, title: 'Unsupported media type' },
  invalid_signature: { code: Code.InvalidArgument, status: 422, title: 'Invalid signature' },
  rate_limited: { code: Code.ResourceExhausted, status: 429, title: 'Too many requests' },
  headers_too_large: { code: Code.ResourceExhausted, status: 431, title: 'Request header fields too large' },
  internal: { code: Code.Internal, status: 500, title: 'Internal error' },
  unimplemented: { code: Code.Unimplemented, status: 501, title: 'Not implemented' },
  upstream_error: { code: Code.Unavailable, status: 502, title: 'Upstream error' },
  unavailable: { code: Code.Unavailable, status: 503, title: 'Service unavailable' },
  upstream_timeout: { code: Code.DeadlineExceeded, status: 504, title: 'Upstream timeout' },
} as const;

export type ProblemCode = keyof typeof PROBLEMS;

export interface ProblemOptions {
  /** Extra members of the problem body (e.g. the payment instructions of a 402). */
  extra?: Record<string, unknown>;
  /** Extra response headers (e.g. Retry-After, WWW-Authenticate). */
  headers?: Record<string, string>;
}

/**
 * The one error type services throw. It is a ConnectError, so Connect and gRPC clients get the
 * mapped Code; REST adapters turn it into problem+json with the mapped HTTP status.
 */
export class ObservatoryError extends ConnectError {
  readonly problem: ProblemCode;
  readonly extra: Record<string, unknown>;
  readonly headers: Record<string, string>;
  constructor(problem: ProblemCode, detail: string, opts: ProblemOptions = {}) {
    // Deliberate refusals: made without a stack (src/domain/stack-traces.ts); a bug's error is
    // never an ObservatoryError, and keeps its stack.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(detail, PROBLEMS[problem].code, opts.headers);
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.problem = problem;
    this.extra = opts.extra ?? {};
    this.headers = opts.headers ?? {};
  }
  get status(): number {
    return PROBLEMS[this.problem].status;
  }
}

export const invalidArgument = (detail: string) => new ObservatoryError('invalid_argument', detail);
export const notTracked = (what: string) => new ObservatoryError('not_tracked', `${what} is not tracked by this observatory`);
export const unimplemented = (what: string) => new ObservatoryError('unimplemented', `${what} is not implemented yet`);

/** Maps a ConnectError raised by the Connect runtime itself (not by us) to a problem code. */
const BY_CONNECT_CODE: Partial<Record<Code, ProblemCode>> = {
  [Code.InvalidArgument]: 'invalid_argument',
  [Code.Unauthenticated]: 'unauthenticated',
  [Code.FailedPrecondition]: 'payment_required',
  [Code.PermissionDenied]: 'forbidden',
  [Code.NotFound]: 'not_found',
  [Code.AlreadyExists]: 'conflict',
  [Code.ResourceExhausted]: 'rate_limited',
  [Code.Unimplemented]: 'unimplemented',
  [Code.Unavailable]: 'unavailable',
  [Code.DeadlineExceeded]: 'upstream_timeout',
};
export function problemForConnectCode(code: Code): ProblemCode {
  return BY_CONNECT_CODE[code] ?? 'internal';
}

// The RFC 9457 problem document every transport answers errors with (REST, the gateway gate).
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ProblemCode;
  request_id?: string;
  [extra: string]: unknown;
}

export function problemBody(code: ProblemCode, detail: string, requestId?: string, extra: Record<string, unknown> = {}): ProblemBody {
  const p = PROBLEMS[code];
  return {
    ...extra,
    type: `https://trust-observatory.dev/problems/${code.replace(/_/g, '-')}`,
    title: p.title,
    status: p.status,
    detail,
    code,
    ...(requestId ? { request_id: requestId } : {}),
  };
}
