// A refusal of client input is made without a stack trace (src/domain/stack-traces.ts): V8's
// capture of one cost more than the rest of the answer, so a flood of malformed requests cost the
// service about three times a flood of answered ones (GET /v1/receipt/nope at 50 connections:
// 282 µs of CPU per refusal, 100 per cached trust read; 178 after). Checked here by what the
// errors carry, not by time.
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { GetReceiptRequestSchema } from '../gen/observatory/v1/receipt_pb.js';
import { PreflightRequestSchema } from '../gen/observatory/v1/trust_pb.js';
import { contractValidator, ruleViolations } from '../src/domain/contract-rules.js';
import { withoutStackTraces } from '../src/domain/stack-traces.js';
import { invalidArgument, notTracked, ObservatoryError } from '../src/errors.js';

const FRAMES = /\n\s+at /;

describe('refusals carry no stack trace', () => {
  it('an ObservatoryError (every deliberate refusal) has none; other errors keep theirs', () => {
    for (const e of [invalidArgument('url is required'), notTracked('https://x.example/mcp'), new ObservatoryError('rate_limited', 'slow down', { headers: { 'retry-after': '5' } })]) {
      expect(e.stack ?? '').not.toMatch(FRAMES);
      expect(e.message).not.toBe('');
    }
    expect(new Error('a bug').stack).toMatch(FRAMES);
    expect(Error.stackTraceLimit).toBeGreaterThan(0);
  });

  it("protovalidate's refusal of a broken rule is made without one, and its violations are intact", () => {
    const limit = Error.stackTraceLimit;
    const r = contractValidator.validate(GetReceiptRequestSchema, create(GetReceiptRequestSchema, { receiptId: 'nope' }));
    expect(r.kind).toBe('invalid');
    expect(r.kind === 'invalid' && r.error.stack).not.toMatch(FRAMES);
    expect(ruleViolations(PreflightRequestSchema, { target: '' })).toEqual([expect.objectContaining({ field: 'target', rule: 'required' })]);
    expect(Error.stackTraceLimit).toBe(limit);
  });

  it('withoutStackTraces puts the limit back, also when its function throws', () => {
    const limit = Error.stackTraceLimit;
    expect(() =>
      withoutStackTraces(() => {
        throw new Error('inside');
      }),
    ).toThrow('inside');
    expect(Error.stackTraceLimit).toBe(limit);
    expect(withoutStackTraces(() => new Error('quiet')).stack).not.toMatch(FRAMES);
  });
});
