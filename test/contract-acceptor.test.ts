import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { create, ScalarType, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { createValidator } from '@bufbuild/protovalidate';
import { compileAcceptor, contractValidator, ruleViolations } from '../src/domain/contract-rules.js';
import { file_observatory_v1_access } from '../gen/observatory/v1/access_pb.js';
import { file_observatory_v1_compliance } from '../gen/observatory/v1/compliance_pb.js';
import { file_observatory_v1_receipt, GetReceiptRequestSchema } from '../gen/observatory/v1/receipt_pb.js';
import { file_observatory_v1_telemetry, ReportRequestSchema } from '../gen/observatory/v1/telemetry_pb.js';
import { file_observatory_v1_trust, GetDemandRequestSchema, GetTrustRequestSchema, PreflightRequestSchema } from '../gen/observatory/v1/trust_pb.js';

// The plain first check in front of protovalidate (src/domain/contract-rules.ts `withAcceptors`):
// it may leave any message to protovalidate, but must never accept one protovalidate refuses.
// Every message of the contract whose rules compile is tried with values at and around each
// rule's edges; the hot requests must compile, or the speed-up is silently gone.

const files = [file_observatory_v1_access, file_observatory_v1_compliance, file_observatory_v1_receipt, file_observatory_v1_telemetry, file_observatory_v1_trust];
const messages: DescMessage[] = [];
const collect = (m: DescMessage) => {
  messages.push(m);
  m.nestedMessages.forEach(collect);
};
for (const f of files) f.messages.forEach(collect);
const compiled = messages.filter((m) => compileAcceptor(m) !== null);
const plain = createValidator();

/** Values at and around every edge the compiled rules have, of the right type and of others. */
function valueOf(f: DescField): fc.Arbitrary<unknown> {
  const others = fc.constantFrom<unknown>(undefined, null, '1', 1, true, {}, [], 2n);
  if (f.fieldKind !== 'scalar') return others;
  switch (f.scalar) {
    case ScalarType.STRING:
      return fc.oneof(
        others,
        fc.constantFrom('', ' ', 'a', '\u0000', '\ud800', '😀'),
        fc.string({ maxLength: 8 }),
        fc.string({ unit: 'grapheme', maxLength: 4 }),
        // Around the max_len values of the contract (200, 2048).
        fc.constantFrom(199, 200, 201, 2047, 2048, 2049).chain((n) => fc.constantFrom('x'.repeat(n), '😀'.repeat(Math.ceil(n / 2)), 'é'.repeat(n))),
      );
    case ScalarType.BOOL:
      return fc.oneof(others, fc.boolean());
    default:
      return fc.oneof(
        others,
        fc.constantFrom(0, -0, 1, -1, 0.5, 99, 100, 101, 598.5, 599, 600, 1000, 1001, 3_600_000, 3_600_000.5, 2 ** 31, -(2 ** 31) - 1, NaN, Infinity, -Infinity),
        fc.double(),
        fc.integer(),
      );
  }
}

const initShape = (m: DescMessage) =>
  fc.record(Object.fromEntries(m.fields.map((f) => [f.localName, valueOf(f)])), { requiredKeys: [] }) as fc.Arbitrary<Record<string, unknown>>;

/** protovalidate's own answer for an init shape, or null when protovalidate cannot even build the message from it. */
function protovalidate(m: DescMessage, shape: Record<string, unknown>): 'valid' | 'invalid' | null {
  let msg;
  try {
    msg = create(m, shape as never);
  } catch {
    return null;
  }
  const r = plain.validate(m, msg);
  return r.kind === 'valid' ? 'valid' : 'invalid';
}

describe('the contract acceptor', () => {
  it('compiles for the requests of the hot paths (trust reads, pre-flight, gate, reports)', () => {
    for (const m of [GetTrustRequestSchema, PreflightRequestSchema, ReportRequestSchema]) expect(compileAcceptor(m), m.typeName).not.toBeNull();
    // Rules of other kinds (a pattern, a list of allowed values) are protovalidate's alone.
    expect(compileAcceptor(GetReceiptRequestSchema)).toBeNull();
    expect(compileAcceptor(GetDemandRequestSchema)).toBeNull();
    expect(compiled.length).toBeGreaterThan(10);
  });

  it('never accepts what protovalidate refuses, for any message of the contract', () => {
    for (const m of compiled) {
      const accept = compileAcceptor(m)!;
      fc.assert(
        fc.property(initShape(m), (shape) => {
          if (!accept(shape)) return;
          // Accepted: protovalidate builds the same message and finds it valid.
          expect(protovalidate(m, shape), `${m.typeName} ${JSON.stringify(shape, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v))}`).toBe('valid');
          // And the message built from it is accepted too (Connect hands the validator messages).
          expect(accept(create(m, shape as never) as never)).toBe(true);
        }),
        { numRuns: 400 },
      );
    }
  });

  it('accepts the valid requests of every day, so the plain check does its work', () => {
    const accept = (m: DescMessage, shape: object) => compileAcceptor(m)!(shape as never);
    expect(accept(GetTrustRequestSchema, { url: 'https://a.example.com/mcp' })).toBe(true);
    expect(accept(PreflightRequestSchema, { target: 'https://a.example.com/mcp' })).toBe(true);
    expect(accept(ReportRequestSchema, { serverUrl: 'https://a.example.com/mcp', success: true, latencyMs: 42 })).toBe(true);
    expect(accept(ReportRequestSchema, { serverUrl: 'https://a.example.com/mcp', success: false, latencyMs: 0, toolName: 'search', httpStatus: 200 })).toBe(true);
    // The edges, on both sides.
    expect(accept(PreflightRequestSchema, { target: 'x'.repeat(2048) })).toBe(true);
    expect(accept(PreflightRequestSchema, { target: 'x'.repeat(2049) })).toBe(false);
    expect(accept(PreflightRequestSchema, { target: '' })).toBe(false);
    expect(accept(ReportRequestSchema, { serverUrl: 'u', success: true, latencyMs: 3_600_001 })).toBe(false);
    expect(accept(ReportRequestSchema, { serverUrl: 'u', success: true, latencyMs: Infinity })).toBe(false);
    expect(accept(ReportRequestSchema, { serverUrl: 'u', success: true, latencyMs: 1, httpStatus: 99 })).toBe(false);
    expect(accept(ReportRequestSchema, { serverUrl: 'u', latencyMs: 1 })).toBe(false);
  });

  it('leaves the refusal and its violations to protovalidate', () => {
    // Refused: the same violations as protovalidate alone names.
    expect(ruleViolations(PreflightRequestSchema, { target: '' })).toEqual([expect.objectContaining({ field: 'target', rule: 'required' })]);
    expect(ruleViolations(ReportRequestSchema, { serverUrl: 'u', success: true, latencyMs: -1, httpStatus: 700 }).map((v) => v.field).sort()).toEqual(['http_status', 'latency_ms']);
    // A message the acceptor does not take is still protovalidate's to accept (surrogate pairs count once).
    const long = '😀'.repeat(1500);
    expect(compileAcceptor(PreflightRequestSchema)!({ target: long })).toBe(false);
    expect(contractValidator.validate(PreflightRequestSchema, create(PreflightRequestSchema, { target: long })).kind).toBe('valid');
  });
});
