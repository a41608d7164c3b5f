import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ExportMetricsServiceRequestSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceRequestSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { AggregationTemporality } from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { Span_SpanKind, Status_StatusCode } from '../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { createSpanJoin } from '../src/domain/otlp-join.js';
import { createHistogramStreams, latenciesOf, MAX_POINT_BUCKETS, readMetrics, type BucketLayout, type ToolPoint } from '../src/domain/otlp-metrics.js';
import { readTraces, type HttpChild, type McpCall } from '../src/domain/otlp-spans.js';
import { hostOf, urlForms } from '../src/services/otlp-servers.js';
import { loadConfig } from '../src/config.js';
import { expectConfigRefusal } from './support/config.js';

// The pure parts of the OTLP mapping (docs/telemetry.md), with fixed clocks.

const id = (n: number, bytes: number) => Buffer.from(n.toString(16).padStart(bytes * 2, '0'), 'hex');
const s = (key: string, v: string) => ({ key, value: { value: { case: 'stringValue' as const, value: v } } });
const i = (key: string, v: number) => ({ key, value: { value: { case: 'intValue' as const, value: BigInt(v) } } });
const MS = 1_000_000n;
const T0 = 1_760_000_000_000n * MS;

describe('readTraces: which spans are MCP tool calls', () => {
  const req = create(ExportTraceServiceRequestSchema, {
    resourceSpans: [
      {
        resource: { attributes: [s('service.name', 'agent')] },
        scopeSpans: [
          {
            spans: [
              // ok tool call with server.address and its own http status
              { traceId: id(1, 16), spanId: id(1, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + 1_500_000n, attributes: [s('mcp.method.name', 'tools/call'), s('gen_ai.tool.name', 'a'), s('server.address', 'x.example.com'), i('server.port', 8443), i('http.response.status_code', 200)] },
              // tool_error: error.type alone makes it a failure
              { traceId: id(1, 16), spanId: id(2, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + 10n * MS, attributes: [s('mcp.method.name', 'tools/call'), s('error.type', 'tool_error')] },
              // status ERROR alone makes it a failure too
              { traceId: id(1, 16), spanId: id(3, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + 10n * MS, attributes: [s('mcp.method.name', 'tools/call')], status: { code: Status_StatusCode.ERROR } },
              // the server side of a call, another method, a span that is no MCP at all
              { traceId: id(1, 16), spanId: id(4, 8), kind: Span_SpanKind.SERVER, startTimeUnixNano: T0, endTimeUnixNano: T0 + MS, attributes: [s('mcp.method.name', 'tools/call')] },
              { traceId: id(1, 16), spanId: id(5, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + MS, attributes: [s('mcp.method.name', 'tools/list')] },
              { traceId: id(1, 16), spanId: id(6, 8), kind: Span_SpanKind.INTERNAL, startTimeUnixNano: T0, endTimeUnixNano: T0 + MS, attributes: [] },
              // an HTTP client child (legacy http.url / http.status_code as well)
              { traceId: id(1, 16), spanId: id(7, 8), parentSpanId: id(1, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + MS, attributes: [s('http.url', 'https://x.example.com/mcp'), i('http.status_code', 201)] },
              // an unusable duration: end before start, and over an hour
              { traceId: id(1, 16), spanId: id(8, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 - 1n, attributes: [s('mcp.method.name', 'tools/call')] },
              { traceId: id(1, 16), spanId: id(9, 8), kind: Span_SpanKind.CLIENT, startTimeUnixNano: T0, endTimeUnixNano: T0 + 3_600_001n * MS, attributes: [s('mcp.method.name', 'tools/call')] },
            ],
          },
        ],
      },
    ],
  });
  const r = readTraces(req);

  it('maps tool, success, latency, server hints and join key', () => {
    expect(r.total).toBe(9);
    expect(r.calls).toHaveLength(3);
    expect(r.calls[0]).toMatchObject({ latencyMs: 1.5, success: true, toolName: 'a', serverAddress: 'x.example.com', serverPort: 8443, httpStatus: 200, url: null });
    expect(r.calls[0]!.joinKey).toBe(id(1, 16).toString('hex') + id(1, 8).toString('hex'));
    expect(r.calls[1]).toMatchObject({ success: false, toolName: null, latencyMs: 10 });
    expect(r.calls[2]).toMatchObject({ success: false });
    expect(r.calls[0]!.resource).toBe(r.calls[1]!.resource);
  });

  it('finds HTTP children and counts the rest', () => {
    expect(r.children).toEqual([{ parentKey: r.calls[0]!.joinKey, url: 'https://x.example.com/mcp', httpStatus: 201, endNs: T0 + MS }]);
    expect(r.other).toBe(3);
    expect(r.invalid).toBe(2);
  });
});

const call = (key: string | null, extra: Partial<McpCall> = {}): McpCall => ({
  joinKey: key,
  latencyMs: 10,
  success: true,
  toolName: 't',
  url: null,
  httpStatus: null,
  serverAddress: null,
  serverPort: null,
  resource: 'r',
  ...extra,
});
const child = (parentKey: string, endNs = 1n): HttpChild => ({ parentKey, url: `https://${parentKey}.example.com`, httpStatus: 200, endNs });

describe('the span join', () => {
  it('joins in one export, child-first and parent-first across exports, and lets unmatched calls go after the window', () => {
    const j = createSpanJoin<string>({ windowMs: 1000, maxSpans: 10 });
    const same = j.offer({ calls: [call('a')], children: [child('a', 1n), child('a', 5n)] }, 'o1', 0);
    expect(same.ready.map((x) => [x.call.joinKey, x.child?.endNs])).toEqual([['a', 5n]]); // the later child (a retry) wins
    expect([...same.joinedKeys]).toEqual(['a']);

    expect(j.offer({ calls: [], children: [child('b')] }, 'o2', 0).ready).toEqual([]);
    const late = j.offer({ calls: [call('b')], children: [] }, 'o3', 100);
    expect(late.ready.map((x) => [x.call.joinKey, x.child?.parentKey, x.origin])).toEqual([['b', 'b', 'o3']]);

    const held = j.offer({ calls: [call('c'), call('d', { url: 'https://own.example.com' })], children: [] }, 'o4', 200);
    expect(held.held).toBe(1);
    expect(held.ready.map((x) => x.call.joinKey)).toEqual(['d']); // a span with its own url.full does not wait
    const joined = j.offer({ calls: [], children: [child('c')] }, 'o5', 300);
    expect(joined.ready.map((x) => [x.call.joinKey, x.child?.parentKey, x.origin])).toEqual([['c', 'c', 'o4']]);

    j.offer({ calls: [call('e')], children: [] }, 'o6', 400);
    expect(j.expire(1399)).toEqual([]);
    expect(j.expire(1400).map((x) => [x.call.joinKey, x.child])).toEqual([['e', null]]);
    expect(j.size()).toEqual({ calls: 0, children: 0 });
  });

  it('is bounded: the oldest held call is released early, the oldest held child dropped', () => {
    const j = createSpanJoin<string>({ windowMs: 1000, maxSpans: 2 });
    j.offer({ calls: [call('a'), call('b')], children: [child('x'), child('y')] }, 'o', 0);
    const more = j.offer({ calls: [call('c')], children: [child('z')] }, 'o', 1);
    expect(more.ready.map((x) => x.call.joinKey)).toEqual(['a']);
    expect(j.size()).toEqual({ calls: 2, children: 2 });
    // x was dropped: its parent arriving now has no child.
    expect(j.offer({ calls: [call('x', { url: 'https://p.example.com' })], children: [] }, 'o', 2).ready[0]!.child).toBeNull();
  });

  it('drops a re-exported span and writes everything held on drain; window 0 holds nothing', () => {
    const j = createSpanJoin<string>({ windowMs: 1000, maxSpans: 10 });
    j.offer({ calls: [call('a')], children: [] }, 'o', 0);
    expect(j.offer({ calls: [call('a')], children: [] }, 'o', 1)).toMatchObject({ duplicates: 1, held: 0 });
    expect(j.drain().map((x) => x.call.joinKey)).toEqual(['a']);
    j.forget(['a']); // its export failed: the retry counts
    expect(j.offer({ calls: [call('a', { url: 'https://p.example.com' })], children: [] }, 'o', 2).ready).toHaveLength(1);
    const none = createSpanJoin<string>({ windowMs: 0, maxSpans: 10 });
    expect(none.offer({ calls: [call('a')], children: [child('b')] }, 'o', 0).ready).toHaveLength(1);
    expect(none.size()).toEqual({ calls: 0, children: 0 });
  });
});

describe('readMetrics: which explicit-bucket points are read', () => {
  const tools = s('mcp.method.name', 'tools/call');
  const histogram = (points: { counts: bigint[]; bounds: number[]; count?: bigint; time?: bigint }[], unit = 's', temporality = AggregationTemporality.DELTA) =>
    create(ExportMetricsServiceRequestSchema, {
      resourceMetrics: [
        {
          scopeMetrics: [
            {
              metrics: [
                {
                  name: 'mcp.client.operation.duration',
                  unit,
                  data: {
                    case: 'histogram',
                    value: {
                      aggregationTemporality: temporality,
                      dataPoints: points.map((p) => ({
                        attributes: [tools],
                        timeUnixNano: p.time ?? T0,
                        bucketCounts: p.counts,
                        explicitBounds: p.bounds,
                        count: p.count ?? p.counts.reduce((a, b) => a + b, 0n),
                      })),
                    },
                  },
                },
              ],
            },
          ],
        },
      ],
    });

  it('reads consistent buckets and says why the others are refused', () => {
    const r = readMetrics(
      histogram([
        { counts: [1n, 2n, 0n], bounds: [0.01, 0.1] },
        { counts: [1n, 2n, 0n], bounds: [0.01, 0.1], count: 4n }, // counts do not add up
        { counts: [1n, 2n, 0n], bounds: [0.1, 0.01] }, // not increasing
        { counts: [1n, 2n], bounds: [0.01, 0.1] }, // one count short
        { counts: [1n], bounds: [], time: 0n },
      ]),
    );
    expect(r.points).toHaveLength(1);
    expect(r.points[0]).toMatchObject({ temporality: 'delta', layout: { kind: 'explicit', boundsMs: [10, 100] }, count: 3n });
    expect(r.invalid).toBe(4);
    expect(r.invalidWhy).toEqual({ buckets: 3, time: 1 });
    expect(readMetrics(histogram([{ counts: [1n], bounds: [] }], 'min')).invalidWhy).toEqual({ unit: 1 });
    expect(readMetrics(histogram([{ counts: [1n], bounds: [] }], 's', AggregationTemporality.UNSPECIFIED)).invalidWhy).toEqual({ temporality: 1 });
  });

  it(`refuses a point of more than ${MAX_POINT_BUCKETS} buckets without adding them up (its stream would remember them)`, () => {
    const bounds = (n: number) => Array.from({ length: n }, (_, k) => (k + 1) / 1000);
    const counts = (n: number) => Object.assign(new Array<bigint>(n).fill(0n), { 0: 1n });
    const r = readMetrics(
      histogram([
        { counts: counts(MAX_POINT_BUCKETS), bounds: bounds(MAX_POINT_BUCKETS - 1) },
        { counts: counts(MAX_POINT_BUCKETS + 1), bounds: bounds(MAX_POINT_BUCKETS) },
        { counts: counts(100_000), bounds: bounds(99_999) },
        // Counts that do not add up are refused for their size first: nothing is added up.
        { counts: counts(100_000), bounds: bounds(99_999), count: 5n },
      ]),
    );
    expect(r.points.map((p) => p.counts.length)).toEqual([MAX_POINT_BUCKETS]);
    expect(r.invalidWhy).toEqual({ too_many_buckets: 3 });
  });
});

const explicit = (boundsMs: number[]): BucketLayout => ({ kind: 'explicit', boundsMs });
const point = (o: Partial<ToolPoint> & { counts: bigint[] }): ToolPoint => ({
  resource: 'r',
  stream: 's',
  temporality: 'cumulative',
  startNs: 100n,
  timeNs: 200n,
  layout: explicit([10, 100]),
  count: o.counts.reduce((a, b) => a + b, 0n),
  sumMs: undefined,
  success: true,
  toolName: 't',
  url: null,
  httpStatus: null,
  serverAddress: 'h',
  serverPort: null,
  ...o,
});

describe('cumulative histogram streams', () => {
  it('counts a stream that started after the watermark fully, then only what each point adds', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 50n });
    expect(st.delta(point({ counts: [1n, 2n, 0n] }), 1000n)).toEqual({ counts: [1, 2, 0], count: 3, sumMs: undefined });
    expect(st.delta(point({ counts: [1n, 2n, 0n] }), 1000n)).toBeNull(); // a re-export
    expect(st.delta(point({ counts: [1n, 2n, 0n], timeNs: 300n }), 1000n)).toBeNull(); // nothing new
    expect(st.delta(point({ counts: [1n, 4n, 1n], timeNs: 400n, sumMs: 90 }), 1000n)).toEqual({ counts: [0, 2, 1], count: 3, sumMs: undefined });
    expect(st.delta(point({ counts: [1n, 5n, 1n], timeNs: 350n }), 1000n)).toBeNull(); // older than the last one
    // A restart of the sender: a new start time, counted in full.
    expect(st.delta(point({ counts: [0n, 1n, 0n], startNs: 500n, timeNs: 600n }), 1000n)).toEqual({ counts: [0, 1, 0], count: 1, sumMs: undefined });
  });

  it('only sets a baseline for a stream older than the watermark, and raises the watermark when it forgets a stream', () => {
    const st = createHistogramStreams({ maxStreams: 1, watermarkNs: 150n });
    expect(st.delta(point({ counts: [5n, 0n, 0n] }), 1000n)).toBeNull(); // started at 100 < 150: maybe counted before a restart
    expect(st.delta(point({ counts: [6n, 0n, 0n], timeNs: 300n }), 1000n)).toEqual({ counts: [1, 0, 0], count: 1, sumMs: undefined });
    expect(st.delta(point({ stream: 'other', startNs: 900n, counts: [1n, 0n, 0n] }), 2000n)).not.toBeNull(); // evicts 's'
    // 's' again: forgotten, and it started before the eviction, so only a baseline.
    expect(st.delta(point({ counts: [9n, 0n, 0n], timeNs: 500n }), 3000n)).toBeNull();
  });

  it('remembers a batch only when it is committed (a failed export counts on its retry), and sees its own earlier points', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 0n });
    const failed = st.begin();
    expect(failed.delta(point({ counts: [1n, 0n, 0n] }))).not.toBeNull(); // never committed
    const retry = st.begin();
    expect(retry.delta(point({ counts: [1n, 0n, 0n] }))).toEqual({ counts: [1, 0, 0], count: 1, sumMs: undefined });
    expect(retry.delta(point({ counts: [3n, 0n, 0n], timeNs: 300n }))).toEqual({ counts: [2, 0, 0], count: 2, sumMs: undefined });
    retry.commit(1n);
    expect(st.delta(point({ counts: [3n, 0n, 0n], timeNs: 300n }), 2n)).toBeNull();
  });

  it('counts a delta point once', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 0n });
    const p = point({ temporality: 'delta', counts: [0n, 2n, 0n] });
    expect(st.delta(p, 1n)).toEqual({ counts: [0, 2, 0], count: 2, sumMs: undefined });
    expect(st.delta(p, 2n)).toBeNull();
    expect(st.delta({ ...p, startNs: 200n, timeNs: 300n }, 3n)).not.toBeNull();
  });
});

describe('latencies of a histogram delta', () => {
  it('uses bucket midpoints, half the first bound, the last bound for overflow', () => {
    expect(latenciesOf({ counts: [1, 2, 3], count: 6, sumMs: 999 }, explicit([10, 100]))).toEqual([
      { latencyMs: 5, count: 1 },
      { latencyMs: 55, count: 2 },
      { latencyMs: 100, count: 3 },
    ]);
  });
  it('uses the exact mean when one bucket holds every call', () => {
    expect(latenciesOf({ counts: [0, 4, 0], count: 4, sumMs: 120 }, explicit([10, 100]))).toEqual([{ latencyMs: 30, count: 4 }]);
    // ...unless the sum does not fit the bucket (then it is not trusted)
    expect(latenciesOf({ counts: [0, 4, 0], count: 4, sumMs: 4000 }, explicit([10, 100]))).toEqual([{ latencyMs: 55, count: 4 }]);
    expect(latenciesOf({ counts: [], count: 2, sumMs: 50 }, explicit([]))).toEqual([{ latencyMs: 25, count: 2 }]);
    expect(latenciesOf({ counts: [], count: 2, sumMs: undefined }, explicit([]))).toEqual([]);
  });
});

describe('server hints', () => {
  it('takes server.address as a host only when it is one', () => {
    expect(hostOf('Weather.Example.com.')).toBe('weather.example.com');
    expect(hostOf('::1')).toBe('[::1]');
    expect(hostOf('[2001:db8::1]')).toBe('[2001:db8::1]');
    for (const bad of ['', 'a b', 'evil.com/path', 'user@host', 'host:80', '-x.com', '/tmp/mcp.sock']) expect(hostOf(bad), bad).toBeNull();
  });
  it('drops credentials, fragment and (unless tracked with it) the query of url.full', () => {
    expect(urlForms('https://user:pw@Api.Example.com:443/mcp/?token=abc#frag')).toEqual({ withQuery: 'https://api.example.com/mcp?token=abc', bare: 'https://api.example.com/mcp' });
    expect(urlForms('http://x.example.com:8080/')).toEqual({ withQuery: null, bare: 'http://x.example.com:8080' });
    expect(urlForms('ftp://x.example.com')).toBeNull();
    expect(urlForms('not a url')).toBeNull();
  });
});

describe('OTLP configuration', () => {
  it('has its defaults and refuses bad values with one line naming the variable', () => {
    expect(loadConfig({}).otlp).toEqual({ maxExportBytes: 4 * 1024 * 1024, maxExportElements: 2_000_000, joinWindowMs: 5000, joinMaxSpans: 10_000, metricStreams: 10_000 });
    expectConfigRefusal('OTLP_MAX_EXPORT_BYTES', '1000');
    expectConfigRefusal('OTLP_MAX_EXPORT_ELEMENTS', '100');
    expectConfigRefusal('OTLP_JOIN_WINDOW_MS', '-1');
    expectConfigRefusal('OTLP_JOIN_MAX_SPANS', 'many');
    expectConfigRefusal('OTLP_METRIC_STREAMS', '5');
  });
});
