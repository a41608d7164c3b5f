import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { claimKey } from '../src/services/preflight.js';
import { gatewayClaimKey, type GatewayClaim } from '../src/services/gate.js';
import type { UpstreamSource } from '../src/domain/gate.js';

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

// The gate shares receipts by gatewayClaimKey instead of JSON of its claim: equal keys must mean
// equal claims, for every member, whatever text a gateway's headers put into them. The record
// below is typed as the claim, so a member added to GatewayClaim and not here fails to compile.
// Small domains of text that runs together when joined ('-a' + '-' and '-' + 'a-'; '1:a' beside a
// length prefix), plus any short string.
const hostileText = fc.oneof(fc.constantFrom('', '-', 'a', '-a', 'a-', '1:a', '1:', ':', '0:', '1', 'a\u0000b', '\u0000', '{}'), fc.string({ maxLength: 3 }), fc.string({ unit: 'binary', maxLength: 2 }));
const gatewayClaim: fc.Arbitrary<GatewayClaim> = fc.record({
  decision: fc.constantFrom('allow' as const, 'deny' as const),
  reason: hostileText,
  via: fc.constantFrom('http' as const, 'envoy_grpc' as const),
  upstream_source: fc.constantFrom(...(['x-mcp-server', 'context_extension', 'x-original-url', 'x-forwarded', 'request', 'route'] as UpstreamSource[])),
  policy: fc.record({ allow_uncertain: fc.boolean(), allow_unrated: fc.boolean() }),
  cached_verdict: fc.boolean(),
  mcp_method: fc.option(hostileText),
  tool_name: fc.option(hostileText),
  tool: fc.option(fc.record({ name: hostileText, drift: fc.constant(null), verdict: fc.constantFrom('PASS', 'FAIL') })),
});

describe('gatewayClaimKey', () => {
  it('is the same exactly when every member of the gateway claim is the same', () => {
    fc.assert(
      fc.property(gatewayClaim, gatewayClaim, (a, b) => {
        expect(gatewayClaimKey(a) === gatewayClaimKey(b)).toBe(JSON.stringify(a) === JSON.stringify(b));
        expect(gatewayClaimKey(a)).toBe(gatewayClaimKey(structuredClone(a)));
      }),
      { numRuns: 20_000 },
    );
  });

  it('tells apart claims that differ in any few members and agree in the rest', () => {
    const members = Object.keys({ decision: 0, reason: 0, via: 0, upstream_source: 0, policy: 0, cached_verdict: 0, mcp_method: 0, tool_name: 0, tool: 0 } satisfies Record<keyof GatewayClaim, 0>) as (keyof GatewayClaim)[];
    fc.assert(
      fc.property(gatewayClaim, gatewayClaim, fc.subarray(members, { minLength: 1, maxLength: 3 }), (a, other, changed) => {
        const b: GatewayClaim = { ...a };
        for (const m of changed) (b as unknown as Record<string, unknown>)[m] = other[m];
        expect(gatewayClaimKey(a) === gatewayClaimKey(b)).toBe(JSON.stringify(a) === JSON.stringify(b));
      }),
      { numRuns: 50_000 },
    );
  });

  it('tells apart claims that differ in one member only, and never looks like JSON', () => {
    const base: GatewayClaim = { decision: 'allow', reason: 'verdict_pass', via: 'http', upstream_source: 'x-mcp-server', policy: { allow_uncertain: false, allow_unrated: false }, cached_verdict: false, mcp_method: null, tool_name: null, tool: null };
    const variants: GatewayClaim[] = [
      base,
      { ...base, decision: 'deny' },
      { ...base, reason: 'verdict_fail' },
      { ...base, via: 'envoy_grpc' },
      { ...base, upstream_source: 'route' },
      { ...base, policy: { allow_uncertain: true, allow_unrated: false } },
      { ...base, policy: { allow_uncertain: false, allow_unrated: true } },
      { ...base, cached_verdict: true },
      { ...base, mcp_method: 'tools/call' },
      { ...base, mcp_method: '' },
      { ...base, tool_name: 'search' },
      { ...base, mcp_method: '1:a', tool_name: null },
      { ...base, mcp_method: null, tool_name: '1:a' },
      // Run together under a bare separator: ':a:b-' + '-' and ':a' + ':b--'.
      { ...base, mcp_method: 'a:b-', tool_name: null },
      { ...base, mcp_method: 'a', tool_name: 'b--' },
      { ...base, tool: { name: 'search' } },
    ];
    expect(new Set(variants.map(gatewayClaimKey)).size).toBe(variants.length);
    for (const v of variants) expect(gatewayClaimKey(v).startsWith('{')).toBe(false);
    // Shared through pre-flight's claimKey: the gate's key and JSON of the same members never meet.
    const s = { target: 'x', server_url: null, name: null, tracked: false, verdict: 'UNRATED', trust_score: null, recommendation: 'caution', total_interactions: 0, anomaly_flags: [] as string[] };
    expect(claimKey('gateway', s, { gateway: base }, gatewayClaimKey(base))).not.toBe(claimKey('gateway', s, { gateway: base }));
  });
});
