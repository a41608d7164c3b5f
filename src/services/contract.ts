import type { DescService } from '@bufbuild/protobuf';
import { ObservatoryError } from '../errors.js';
import { ruleViolations, violationsDetail, type RuleViolation } from '../domain/contract-rules.js';

// The services check every request against the buf.validate rules of its message before any
// work, so each door that calls a service (REST adapters, MCP tools, A2A skills) gives the answer
// the Connect/gRPC interceptor gives (src/http/contract-validation.ts): one rule, one decision.

/** invalid_argument listing the broken rules: REST shows them as `violations` in the problem body. */
export function contractViolation(violations: RuleViolation[]): ObservatoryError {
  return new ObservatoryError('invalid_argument', violationsDetail(violations), { extra: { violations } });
}

type Impl = Record<string, unknown>;

/**
 * Makes every unary method of `impl` named after a method of `service` check its request message
 * first (in place: the object keeps its identity); a broken rule is a rejected promise, as any
 * other refusal of an async service method. Client streams check each element themselves, so one
 * bad report refuses that report, not the stream.
 */
export function enforceContract<T extends object>(impl: T, service: DescService): T {
  const target = impl as Impl;
  for (const method of service.methods) {
    if (method.methodKind !== 'unary') continue;
    const fn = target[method.localName];
    if (typeof fn !== 'function') continue;
    target[method.localName] = (req: object | undefined, ...rest: unknown[]) => {
      const violations = ruleViolations(method.input, (req ?? {}) as never);
      if (violations.length) return Promise.reject(contractViolation(violations));
      return (fn as (...a: unknown[]) => unknown)(req, ...rest);
    };
  }
  return impl;
}
