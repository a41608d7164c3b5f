import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { claimKey } from '../src/services/preflight.js';

// Pre-flight receipts are shared per claim (RECEIPT_SHARE_MS): two statements that differ in any
// member must never share a key, or one caller would be handed a receipt signing another claim.
// Small domains, so that statements equal in all but one member come up often.
const text = fc.constantFrom('', 'a', 'ab', '+a', '-', 'a\u00e9', 'x y');
const statement = fc.record({
  target: text,
  server_url: fc.option(fc.constantFrom('https://a.example.com/mcp', 'https://b.example.com/mcp', 'https://a.example.com/mcp2')),
  name: fc.option(text),
  tracked: fc.boolean(),
  verdict: fc.constantFrom('PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'),
  trust_score: fc.option(fc.constantFrom(0, 1, 10)),
  recommendation: fc.constantFrom('proceed', 'caution', 'block'),
  total_interactions: fc.nat(2),
  anomaly_flags: fc.array(fc.constantFrom('latency_spike', 'a,b', ''), { maxLength: 2 }),
});
const extra = fc.option(fc.record({ gateway: fc.record({ decision: fc.constantFrom('allow', 'deny'), reason: text }) }), { nil: undefined });
const kind = fc.constantFrom('preflight', 'gateway', 'agent_query');

describe('claimKey', () => {
  it('is the same exactly when kind, every member of the statement and the extra members are the same', () => {
    fc.assert(
      fc.property(kind, statement, extra, kind, statement, extra, (k1, s1, e1, k2, s2, e2) => {
        const same = k1 === k2 && JSON.stringify(s1) === JSON.stringify(s2) && JSON.stringify(e1) === JSON.stringify(e2);
        expect(claimKey(k1, s1, e1) === claimKey(k2, s2, e2)).toBe(same);
        expect(claimKey(k1, s1, e1)).toBe(claimKey(k1, structuredClone(s1), e1 === undefined ? undefined : structuredClone(e1)));
      }),
      { numRuns: 20_000 },
    );
  });

  it('tells apart members that concatenation alone would run together', () => {
    const base = { target: 'x', server_url: null, name: null, tracked: false, verdict: 'UNRATED', trust_score: null, recommendation: 'caution', total_interactions: 0, anomaly_flags: [] as string[] };
    const keys = new Set([
      claimKey('preflight', { ...base, tracked: true, name: null }, undefined),
      claimKey('preflight', { ...base, server_url: '-' }, undefined),
      claimKey('preflight', base, undefined),
      claimKey('preflight', { ...base, target: 'x1' }, undefined),
      claimKey('preflight', { ...base, total_interactions: 1 }, undefined),
      claimKey('preflight', { ...base, anomaly_flags: ['a', 'b'] }, undefined),
      claimKey('preflight', { ...base, anomaly_flags: ['a,b'] }, undefined),
      claimKey('preflight', { ...base, anomaly_flags: [''] }, undefined),
      claimKey('preflight', { ...base, tracked: true, name: '' }, undefined),
      claimKey('preflight', { ...base, server_url: 'https://a.example.com/mcp' }, undefined),
      claimKey('preflight', base, {}),
      claimKey('gateway', base, undefined),
    ]);
    expect(keys.size).toBe(12);
  });
});
