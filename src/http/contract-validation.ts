import type { Interceptor } from '@connectrpc/connect';
import { createValidateInterceptor } from '@connectrpc/validate';
import { contractValidator } from '../domain/contract-rules.js';

/**
 * Connect, gRPC and gRPC-Web: every unary (and server-streaming) request message is checked
 * against its buf.validate rules by @connectrpc/validate before the handler runs; a violation is
 * InvalidArgument with the standard buf.validate.Violations error detail (field path, rule id,
 * message). Client streams (ReportStream) are left to the service, which checks each element
 * with the same validator and answers a bad row as a rejection instead of failing the stream.
 */
export function contractValidationInterceptor(): Interceptor {
  const validate = createValidateInterceptor({ validator: contractValidator });
  return (next) => {
    const checked = validate(next);
    return (req) => (req.stream ? next(req) : checked(req));
  };
}
