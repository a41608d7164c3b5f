// Security audit finding (OTLP attribution by address): creating the bare origin as a server stole
// every OTLP span that identifies its server only by `server.address`. The resolver preferred a
// tracked `https://host` over the only real server at that origin, so one report for
// `https://wx.example.com` (from anyone) sent every honest address-only span about
// `https://wx.example.com/mcp` to the origin server. Reproduced (audit otlp-origin.ts): an honest
// failure span with only server.address wx.example.com was credited to /mcp; after one report for
// the origin (and the 60 s address cache) the next five went to the origin. Now (docs/telemetry.md
// "server.address / server.port"): the one server tracked at the origin gets the span; among
// several, the one established there (catalogue, or evidence from more than one source family),
// the origin no more than any other; none or several established: rejected as ambiguous, counted
// in the export's partial success with a message saying so.
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExportTraceServiceRequestSchema, ExportTraceServiceResponseSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { KeyValueSchema } from '../gen/opentelemetry/proto/common/v1/common_pb.js';
import { Span_SpanKind, Status_StatusCode } from '../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { fromBinary } from '@bufbuild/protobuf';
import { establishedAtOrigin } from '../src/services/otlp-servers.js';
import { postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

let t: TestApp;
let net = 0;
/** A client address in a network of its own (each is its own source family). */
const freshAddress = () => `203.${10 + Math.floor(++net / 250)}.${net % 250}.9`;
let traceNo = 0;

type Attr = MessageInitShape<typeof KeyValueSchema>;
const str = (key: string, v: string): Attr => ({ key, value: { value: { case: 'stringValue', value: v } } });
const hex = (n: number, b: number) => Buffer.from(n.toString(16).padStart(b * 2, '0'), 'hex');

/** One MCP tools/call client span that names its server only by server.address (a failure). */
async function addressOnlySpan(host: string, from: string) {
  const trace = ++traceNo;
  const span = {
    traceId: hex(trace, 16),
    spanId: hex(trace, 8),
    name: 'tools/call',
    kind: Span_SpanKind.CLIENT,
    startTimeUnixNano: 1_760_000_000_000n * 1_000_000n,
    endTimeUnixNano: 1_760_000_000_000n * 1_000_000n + 900_000_000n,
    attributes: [str('mcp.method.name', 'tools/call'), str('gen_ai.tool.name', 'get_forecast'), str('server.address', host)],
    status: { code: Status_StatusCode.ERROR },
  };
  const body = toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans: [span] }] }] }));
  const res = await fetch(`${t.base}/v1/traces`, { method: 'POST', headers: { 'content-type': 'application/x-protobuf', 'x-forwarded-for': from }, body: Buffer.from(body) });
  expect(res.status).toBe(200);
  return fromBinary(ExportTraceServiceResponseSchema, Buffer.from(await res.arrayBuffer())).partialSuccess;
}

async function report(url: string, from: string, n = 1) {
  for (let i = 0; i < n; i++) expect((await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 50 }, { 'x-forwarded-for': from })).status).toBe(200);
}
const count = async (url: string) =>
  (await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry tl JOIN servers s ON s.id = tl.server_id WHERE s.url = $1', [url]))[0]?.n ?? 0;

beforeAll(async () => {
  // No holding: an address-only span is written (or rejected) in its own export's answer.
  t = await startTestApp({ OTLP_JOIN_WINDOW_MS: '0', TRUST_PROXY: '1' });
}, 60_000);
afterAll(async () => {
  await t?.close();
});

describe('establishedAtOrigin (pure)', () => {
  it('the one catalogue server or server with evidence from more than one family; never the origin for being tracked', () => {
    const s = (url: string, families: number, catalogued = false) => ({ url, families, catalogued });
    expect(establishedAtOrigin([s('https://o.example', 1), s('https://o.example/mcp', 2)])).toBe('https://o.example/mcp');
    expect(establishedAtOrigin([s('https://o.example', 1), s('https://o.example/mcp', 1)])).toBeNull();
    expect(establishedAtOrigin([s('https://o.example', 3), s('https://o.example/mcp', 2)])).toBeNull();
    expect(establishedAtOrigin([s('https://o.example', 5), s('https://o.example/mcp', 0, true)])).toBeNull();
    expect(establishedAtOrigin([s('https://o.example', 1), s('https://o.example/mcp', 0, true)])).toBe('https://o.example/mcp');
  });
});

describe(`OTLP spans that name only server.address (${backend})`, () => {
  it('a report creating the bare origin does not take the spans of the real server established there', async () => {
    const REAL = 'https://wx.example.com/mcp';
    const ORIGIN = 'https://wx.example.com';
    await report(REAL, freshAddress());
    await report(REAL, freshAddress());
    // The origin created by one report (anyone can do this).
    await report(ORIGIN, freshAddress());
    for (let i = 0; i < 5; i++) expect(await addressOnlySpan('wx.example.com', freshAddress())).toBeUndefined();
    expect(await count(REAL)).toBe(2 + 5);
    expect(await count(ORIGIN)).toBe(1);
  });

  it('several servers at the origin and none (or both) established: rejected as ambiguous, said in the partial success', async () => {
    const A = 'https://amb.example.com/mcp';
    const ORIGIN = 'https://amb.example.com';
    await report(A, freshAddress());
    await report(ORIGIN, freshAddress());
    const p = await addressOnlySpan('amb.example.com', freshAddress());
    expect(p?.rejectedSpans).toBe(1n);
    expect(p?.errorMessage).toContain('ambiguous');
    expect(p?.errorMessage).toContain('server.address');
    expect([await count(A), await count(ORIGIN)]).toEqual([1, 1]);
    // Both established (each from two families): still nobody's. (Another host: answers by address are reused for 60 s.)
    const B = 'https://amb2.example.com/mcp';
    for (const url of [B, B, 'https://amb2.example.com', 'https://amb2.example.com']) await report(url, freshAddress());
    const q = await addressOnlySpan('Amb2.Example.com.', freshAddress());
    expect(q?.rejectedSpans).toBe(1n);
    expect([await count(B), await count('https://amb2.example.com')]).toEqual([2, 2]);
  });

  it('a catalogue server at the origin takes the spans from a bare origin someone reported', async () => {
    const CAT = 'https://cat-origin.example.com/v1/mcp';
    const ORIGIN = 'https://cat-origin.example.com';
    const s = await t.obs.services.catalogue.importDocument({
      servers: [{ server: { name: 'io.github.cat/origin', version: '1.0.0', remotes: [{ type: 'streamable-http', url: CAT }] }, _meta: { 'io.modelcontextprotocol.registry/official': { status: 'active', isLatest: true } } }],
      metadata: { count: 1 },
    });
    expect(s.added).toBe(1);
    await report(ORIGIN, freshAddress());
    expect(await addressOnlySpan('cat-origin.example.com', freshAddress())).toBeUndefined();
    expect([await count(CAT), await count(ORIGIN)]).toEqual([1, 1]);
  });

  it('one server at the origin gets the span whatever its evidence; none tracked: the origin', async () => {
    const ONLY = 'https://only.example.com/api/mcp';
    await report(ONLY, freshAddress());
    expect(await addressOnlySpan('only.example.com', freshAddress())).toBeUndefined();
    expect(await count(ONLY)).toBe(2);
    expect(await addressOnlySpan('untracked-origin.example.com', freshAddress())).toBeUndefined();
    expect(await count('https://untracked-origin.example.com')).toBe(1);
  });
});
