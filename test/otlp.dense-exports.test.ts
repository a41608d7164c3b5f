import * as protobuf from '@bufbuild/protobuf';
import { create, fromBinary, toBinary, toJsonString, type DescMessage } from '@bufbuild/protobuf';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { Code, createContextValues } from '@connectrpc/connect';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { CompressionAlgorithm } from '@opentelemetry/otlp-exporter-base';
import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { StatusSchema } from '../gen/google/rpc/status_pb.js';
import { ExportMetricsServiceRequestSchema, ExportMetricsServiceResponseSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceRequestSchema, ExportTraceServiceResponseSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { AnyValueSchema, KeyValueSchema } from '../gen/opentelemetry/proto/common/v1/common_pb.js';
import { ResourceSchema } from '../gen/opentelemetry/proto/resource/v1/resource_pb.js';
import {
  ExponentialHistogramDataPoint_BucketsSchema,
  ExponentialHistogramDataPointSchema,
  ExponentialHistogramSchema,
  MetricSchema,
  ResourceMetricsSchema,
  ScopeMetricsSchema,
} from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { ResourceSpansSchema, ScopeSpansSchema, Span_SpanKind } from '../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { recordingSpanExporter, sendToolCalls } from './support/otel.js';

// Exports dense in messages and values cost far more to decode than their bytes say: 4 MiB of
// 2,000,000 empty AnyValues took 660 ms and 265 MB in fromBinary. Every OTLP door (OTLP/HTTP
// protobuf and JSON, OTLP/gRPC over gRPC, gRPC-Web and Connect) refuses such an export before it
// is decoded (413 / RESOURCE_EXHAUSTED naming OTLP_MAX_EXPORT_ELEMENTS, as the size refusal), stores
// nothing of it, and still reads a realistic export of the same bytes in full
// (docs/telemetry.md "What an export may cost").

// Every decode of an OTLP message by the service goes through these (src/domain/otlp-export.ts):
// spied, to see that a refused export was never built.
vi.mock('@bufbuild/protobuf', async (importOriginal) => {
  const m = await importOriginal<typeof import('@bufbuild/protobuf')>();
  return { ...m, fromBinary: vi.fn(m.fromBinary), mergeFromBinary: vi.fn(m.mergeFromBinary), fromJson: vi.fn(m.fromJson), fromJsonString: vi.fn(m.fromJsonString) };
});

/** Calls that built an OTLP message since the last call. */
function otlpDecodes(): number {
  let n = 0;
  for (const f of [protobuf.fromBinary, protobuf.mergeFromBinary, protobuf.fromJson, protobuf.fromJsonString] as unknown as ReturnType<typeof vi.fn>[]) {
    n += f.mock.calls.filter((c) => String((c[0] as DescMessage | undefined)?.typeName).startsWith('opentelemetry.proto.')).length;
    f.mockClear();
  }
  return n;
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

const rows = async (serverUrl: string) =>
  (await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1', [serverUrl]))[0]!.n;

const str = (key: string, v: string) => ({ key, value: { value: { case: 'stringValue' as const, value: v } } });
const NOW_NS = () => BigInt(Date.now()) * 1_000_000n;

let ids = 0;

/** An MCP client tools/call span naming its server (url.full): a report when the export is read. Ids of its own. */
function toolCall(i: number, url: string, extra = 0) {
  const id = ++ids;
  return {
    traceId: Buffer.from(`${id.toString(16).padStart(8, '0')}`.repeat(4), 'hex'),
    spanId: Buffer.from(`${id.toString(16).padStart(16, '0')}`, 'hex'),
    name: 'tools/call search',
    kind: Span_SpanKind.CLIENT,
    startTimeUnixNano: NOW_NS() - 2_000_000_000n,
    endTimeUnixNano: NOW_NS() - 1_990_000_000n,
    attributes: [str('mcp.method.name', 'tools/call'), str('gen_ai.tool.name', 'search'), str('url.full', url), ...Array.from({ length: extra }, (_, j) => str(`app.attribute.${j}`, `value ${i}-${j}`))],
  };
}

/** A span of the kind an instrumented agent sends in bulk (HTTP, database): read, not a tool call. */
function bulkSpan(i: number) {
  return { ...toolCall(i, '', 20), name: 'GET /api/items', attributes: Array.from({ length: 20 }, (_, j) => str(`http.attribute.${j}`, `value ${i}-${j}`)) };
}

/** Bytes of `field` of a message of `desc` holding `value` (bytes already encoded). */
function field(desc: DescMessage, name: string, value: Uint8Array): Uint8Array {
  return new BinaryWriter().tag(desc.fields.find((f) => f.name === name)!.number, 2).bytes(value).finish();
}
const cat = (...parts: Uint8Array[]) => Buffer.concat(parts);

/**
 * The export of the finding, built on the wire: a resource attribute holding an array of
 * `n` empty AnyValues (two bytes each), and one MCP tool call to `url`.
 */
function denseTraces(n: number, url: string): Buffer {
  const values = Buffer.alloc(2 * n);
  for (let i = 0; i < n; i++) values[2 * i] = 0x0a;
  const array = field(AnyValueSchema, 'array_value', values.length > 0 ? values : new Uint8Array());
  const kv = cat(toBinary(KeyValueSchema, create(KeyValueSchema, { key: 'k' })), field(KeyValueSchema, 'value', array));
  const resource = field(ResourceSchema, 'attributes', kv);
  const scope = field(ResourceSpansSchema, 'scope_spans', toBinary(ScopeSpansSchema, create(ScopeSpansSchema, { spans: [toolCall(1, url)] })));
  const rs = cat(field(ResourceSpansSchema, 'resource', resource), scope);
  return Buffer.from(field(ExportTraceServiceRequestSchema, 'resource_spans', rs));
}

/** The same as OTLP/JSON (hex ids), or as protobuf JSON (base64 ids): `n` empty values. */
function denseTracesJson(n: number, url: string, ids: 'hex' | 'base64'): Buffer {
  const span = JSON.parse(toJsonString(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans: [toolCall(1, url)] }] }] }))).resourceSpans[0]
    .scopeSpans[0].spans[0];
  if (ids === 'hex') for (const id of ['traceId', 'spanId']) span[id] = Buffer.from(span[id], 'base64').toString('hex');
  const head = `{"resourceSpans":[{"scopeSpans":[{"spans":[${JSON.stringify(span)}]}],"resource":{"attributes":[{"key":"k","value":{"arrayValue":{"values":[`;
  return Buffer.from(head + new Array(n).fill('{}').join(',') + ']}}}]}}]}');
}

/** An exponential histogram point of `n` bucket counts of 1 (one byte each), packed. */
function denseMetrics(n: number): Buffer {
  const counts = field(ExponentialHistogramDataPoint_BucketsSchema, 'bucket_counts', Buffer.alloc(n, 1));
  const point = field(ExponentialHistogramSchema, 'data_points', field(ExponentialHistogramDataPointSchema, 'positive', counts));
  const metric = cat(toBinary(MetricSchema, create(MetricSchema, { name: 'dense' })), field(MetricSchema, 'exponential_histogram', point));
  return Buffer.from(field(ExportMetricsServiceRequestSchema, 'resource_metrics', field(ResourceMetricsSchema, 'scope_metrics', field(ScopeMetricsSchema, 'metrics', metric))));
}

/** A realistic large export: `bulk` spans of 20 attributes and `calls` tool calls to `url`. */
function realisticTraces(bulk: number, calls: number, url: string) {
  return create(ExportTraceServiceRequestSchema, {
    resourceSpans: [
      {
        resource: { attributes: [str('service.name', 'realistic-agent'), str('telemetry.sdk.language', 'nodejs')] },
        scopeSpans: [{ scope: { name: '@opentelemetry/instrumentation-http', version: '0.200.0' }, spans: [...Array.from({ length: bulk }, (_, i) => bulkSpan(i)), ...Array.from({ length: calls }, (_, i) => toolCall(i, url, 5))] }],
      },
    ],
  });
}

const MiB = 1024 * 1024;

async function postOtlp(path: string, body: Buffer, type = 'application/x-protobuf') {
  const res = await fetch(`${t.base}${path}`, { method: 'POST', headers: { 'content-type': type }, body });
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

/** One call over a bare HTTP/2 stream, the message in one gRPC (or gRPC-Web) envelope: its status and message. */
function rawGrpc(path: string, message: Buffer, contentType = 'application/grpc'): Promise<{ status: number; message: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(t.base);
    session.on('error', reject);
    const head = Buffer.alloc(5);
    head.writeUInt32BE(message.length, 1);
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': contentType, te: 'trailers' });
    let h: http2.IncomingHttpHeaders = {};
    const body: Buffer[] = [];
    req.on('response', (x) => (h = { ...h, ...x }));
    req.on('trailers', (x) => (h = { ...h, ...x }));
    req.on('data', (c: Buffer) => body.push(c));
    req.on('end', () => {
      session.close();
      // gRPC-Web: the trailers are the body's last frame.
      const text = Buffer.concat(body).toString('latin1');
      const status = h['grpc-status'] ?? /grpc-status:\s*(\d+)/i.exec(text)?.[1];
      const message = h['grpc-message'] ?? /grpc-message:\s*([^\r]*)/i.exec(text)?.[1] ?? '';
      resolve({ status: Number(status), message: decodeURIComponent(String(message)) });
    });
    req.on('error', reject);
    req.end(Buffer.concat([head, message]));
  });
}

/** A Connect unary call (binary or JSON): its code and message. */
async function connectCall(path: string, message: Buffer, type: 'application/proto' | 'application/json') {
  const res = await fetch(`${t.base}${path}`, { method: 'POST', headers: { 'content-type': type }, body: message });
  const body = (await res.json()) as { code?: string; message?: string };
  return { status: res.status, code: body.code, message: body.message ?? '' };
}

const TRACES = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';
const METRICS = '/opentelemetry.proto.collector.metrics.v1.MetricsService/Export';

describe(`exports dense in elements are refused before they are decoded, on every door (${backend})`, () => {
  it('OTLP/HTTP protobuf: the finding\'s export is 413 + RESOURCE_EXHAUSTED naming the cap, never decoded, nothing stored; a realistic export of as many bytes is read in full', async () => {
    const url = 'https://dense-http-proto.example.com/mcp';
    const dense = denseTraces(2_000_000, url);
    expect(dense.length).toBeGreaterThan(3.8 * MiB);
    otlpDecodes();
    const res = await postOtlp('/v1/traces', dense);
    expect(res.status).toBe(413);
    const status = fromBinary(StatusSchema, res.body);
    expect(status.code).toBe(Code.ResourceExhausted);
    expect(status.message).toContain('more than 2000000 elements (OTLP_MAX_EXPORT_ELEMENTS');
    expect(otlpDecodes()).toBe(0);
    expect(await rows(url)).toBe(0);

    // 4,700 spans of 20 attributes and 40 tool calls: about as many bytes, every span read.
    const realUrl = 'https://realistic-http-proto.example.com/mcp';
    const real = Buffer.from(toBinary(ExportTraceServiceRequestSchema, realisticTraces(4_700, 40, realUrl)));
    expect(real.length).toBeGreaterThan(3.5 * MiB);
    const ok = await postOtlp('/v1/traces', real);
    expect(ok.status).toBe(200);
    expect(fromBinary(ExportTraceServiceResponseSchema, ok.body).partialSuccess?.rejectedSpans).toBe(4_700n);
    await expect.poll(() => rows(realUrl), { timeout: 15_000 }).toBe(40);
    expect(otlpDecodes()).toBeGreaterThan(0);

    // Under the cap, but one span that holds more than 250,000 elements: refused the same way.
    const bigSpan = Buffer.from(
      toBinary(
        ExportTraceServiceRequestSchema,
        create(ExportTraceServiceRequestSchema, {
          resourceSpans: [{ scopeSpans: [{ spans: [{ ...toolCall(1, 'https://one-big-span.example.com/mcp'), attributes: [str('mcp.method.name', 'tools/call'), { key: 'k', value: { value: { case: 'arrayValue', value: { values: Array.from({ length: 260_000 }, () => ({})) } } } }] }] }] }],
        }),
      ),
    );
    const one = await postOtlp('/v1/traces', bigSpan);
    expect(one.status).toBe(413);
    expect(fromBinary(StatusSchema, one.body).message).toBe('a span (with its resource and scope) holds more than 250000 elements');
    expect(await rows('https://one-big-span.example.com/mcp')).toBe(0);
  });

  it('OTLP/HTTP JSON: 413 + RESOURCE_EXHAUSTED before JSON.parse or the decoder, nothing stored; a realistic JSON export is read in full', async () => {
    const url = 'https://dense-http-json.example.com/mcp';
    const dense = denseTracesJson(1_350_000, url, 'hex');
    expect(dense.length).toBeGreaterThan(3.8 * MiB);
    const parse = vi.spyOn(JSON, 'parse');
    otlpDecodes();
    const res = await postOtlp('/v1/traces', dense, 'application/json');
    const parsedLarge = parse.mock.calls.filter((c) => typeof c[0] === 'string' && c[0].length > MiB).length;
    parse.mockRestore();
    expect(res.status).toBe(413);
    const status = JSON.parse(res.body.toString('utf8')) as { code: number; message: string };
    expect(status.code).toBe(Code.ResourceExhausted);
    expect(status.message).toContain('OTLP_MAX_EXPORT_ELEMENTS');
    expect(parsedLarge).toBe(0);
    expect(otlpDecodes()).toBe(0);
    expect(await rows(url)).toBe(0);

    const realUrl = 'https://realistic-http-json.example.com/mcp';
    const json = JSON.parse(toJsonString(ExportTraceServiceRequestSchema, realisticTraces(2_550, 40, realUrl))) as { resourceSpans: { scopeSpans: { spans: Record<string, string>[] }[] }[] };
    for (const s of json.resourceSpans[0]!.scopeSpans[0]!.spans) for (const id of ['traceId', 'spanId']) s[id] = Buffer.from(s[id]!, 'base64').toString('hex');
    const real = Buffer.from(JSON.stringify(json));
    expect(real.length).toBeGreaterThan(3.5 * MiB);
    const ok = await postOtlp('/v1/traces', real, 'application/json');
    expect(ok.status).toBe(200);
    expect((JSON.parse(ok.body.toString('utf8')) as { partialSuccess?: { rejectedSpans?: string } }).partialSuccess?.rejectedSpans).toBe('2550');
    await expect.poll(() => rows(realUrl), { timeout: 15_000 }).toBe(40);
  });

  it('OTLP/gRPC: RESOURCE_EXHAUSTED naming the cap over gRPC, gRPC-Web and Connect (binary and JSON), never decoded, nothing stored; realistic exports, the official exporter\'s among them, are read in full', async () => {
    const url = 'https://dense-grpc.example.com/mcp';
    const dense = denseTraces(2_000_000, url);
    otlpDecodes();
    for (const type of ['application/grpc', 'application/grpc+proto', 'application/grpc-web+proto']) {
      const r = await rawGrpc(TRACES, dense, type);
      expect(r.status, type).toBe(Code.ResourceExhausted);
      expect(r.message, type).toContain('OTLP_MAX_EXPORT_ELEMENTS');
    }
    const proto = await connectCall(TRACES, dense, 'application/proto');
    expect([proto.status, proto.code]).toEqual([429, 'resource_exhausted']);
    expect(proto.message).toContain('OTLP_MAX_EXPORT_ELEMENTS');
    const json = await connectCall(TRACES, denseTracesJson(1_300_000, url, 'base64'), 'application/json');
    expect([json.status, json.code]).toEqual([429, 'resource_exhausted']);
    expect(json.message).toContain('a JSON value counts two');
    expect(otlpDecodes()).toBe(0);
    expect(await rows(url)).toBe(0);

    // Hand-built, as many bytes as the dense one.
    const realUrl = 'https://realistic-grpc.example.com/mcp';
    const real = Buffer.from(toBinary(ExportTraceServiceRequestSchema, realisticTraces(4_700, 40, realUrl)));
    expect(real.length).toBeGreaterThan(3.5 * MiB);
    expect(await rawGrpc(TRACES, real)).toEqual({ status: 0, message: '' });
    await expect.poll(() => rows(realUrl), { timeout: 15_000 }).toBe(40);
    // The stock OpenTelemetry gRPC exporter: 1,024 tool calls with their HTTP child spans, 20 more
    // attributes each, in exports of 2,048 spans (about 3 MB each).
    const sdkUrl = 'https://realistic-grpc-sdk.example.com/mcp';
    const extra = Object.fromEntries(Array.from({ length: 20 }, (_, j) => [`app.attribute.${j}`, `a value the agent's own instrumentation adds, number ${j}`]));
    const rec = recordingSpanExporter(new GrpcTraceExporter({ url: t.base, compression: CompressionAlgorithm.GZIP }));
    await sendToolCalls(
      rec.exporter,
      Array.from({ length: 1024 }, () => ({ url: sdkUrl, tool: 'search', latencyMs: 25, extra, childExtra: extra })),
    );
    expect(rec.ok()).toBe(true);
    await expect.poll(() => rows(sdkUrl), { timeout: 15_000 }).toBe(1024);
    // Connect (gzip, and JSON) and gRPC-Web read theirs as well.
    const small = (u: string) => create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans: [toolCall(1, u), toolCall(2, u)] }] }] });
    const gz = await fetch(`${t.base}${TRACES}`, { method: 'POST', headers: { 'content-type': 'application/proto', 'content-encoding': 'gzip' }, body: gzipSync(toBinary(ExportTraceServiceRequestSchema, small('https://connect-gzip.example.com/mcp'))) });
    expect(gz.status).toBe(200);
    const js = await connectCall(TRACES, Buffer.from(toJsonString(ExportTraceServiceRequestSchema, small('https://connect-json.example.com/mcp'))), 'application/json');
    expect(js.status).toBe(200);
    expect(await rawGrpc(TRACES, Buffer.from(toBinary(ExportTraceServiceRequestSchema, small('https://grpc-web.example.com/mcp'))), 'application/grpc-web+proto')).toEqual({ status: 0, message: '' });
    for (const u of ['https://connect-gzip.example.com/mcp', 'https://connect-json.example.com/mcp', 'https://grpc-web.example.com/mcp']) await expect.poll(() => rows(u), { timeout: 15_000 }).toBe(2);
  });

  it('metrics: a dense exponential histogram is refused on OTLP/HTTP and OTLP/gRPC; a Collector batch of 8,192 points of 160 buckets is read', async () => {
    const dense = denseMetrics(4_000_000);
    expect(dense.length).toBeGreaterThan(3.8 * MiB);
    otlpDecodes();
    const res = await postOtlp('/v1/metrics', dense);
    expect(res.status).toBe(413);
    expect(fromBinary(StatusSchema, res.body).message).toContain('OTLP_MAX_EXPORT_ELEMENTS');
    const r = await rawGrpc(METRICS, dense);
    expect(r.status).toBe(Code.ResourceExhausted);
    expect(r.message).toContain('OTLP_MAX_EXPORT_ELEMENTS');
    expect(otlpDecodes()).toBe(0);

    const host = 'collector-batch.example.com';
    const point = (i: number) => ({
      attributes: [str('mcp.method.name', i < 10 ? 'tools/call' : 'tools/list'), str('server.address', host), str('gen_ai.tool.name', `tool-${i}`)],
      startTimeUnixNano: NOW_NS() - 60_000_000_000n,
      timeUnixNano: NOW_NS(),
      count: 160n,
      scale: 3,
      zeroCount: 0n,
      positive: { offset: -80, bucketCounts: Array.from({ length: 160 }, () => 1n) },
    });
    const batch = create(ExportMetricsServiceRequestSchema, {
      resourceMetrics: [
        {
          resource: { attributes: [str('service.name', 'collector-batch')] },
          scopeMetrics: [{ metrics: [{ name: 'mcp.client.operation.duration', unit: 's', data: { case: 'exponentialHistogram', value: { aggregationTemporality: 1, dataPoints: Array.from({ length: 8192 }, (_, i) => point(i)) } } }] }],
        },
      ],
    });
    // The tools/call points name a server that is tracked: their calls become reports.
    const tracked = 'https://collector-batch.example.com/mcp';
    expect((await postOtlp('/v1/traces', Buffer.from(toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: [str('service.name', 'tracker')] }, scopeSpans: [{ spans: [toolCall(1, tracked)] }] }] }))))).status).toBe(200);
    const ok = await postOtlp('/v1/metrics', Buffer.from(toBinary(ExportMetricsServiceRequestSchema, batch)));
    expect(ok.status).toBe(200);
    const partial = fromBinary(ExportMetricsServiceResponseSchema, ok.body).partialSuccess;
    expect(partial?.rejectedDataPoints).toBe(8182n);
    await expect.poll(() => rows(tracked), { timeout: 15_000 }).toBe(1 + 10 * 160);
  });

  it('an export whose client left before its turn is not decoded, nor stored', async () => {
    const url = 'https://abandoned.example.com/mcp';
    const bytes = toBinary(ExportTraceServiceRequestSchema, realisticTraces(100, 5, url));
    otlpDecodes();
    const gone = { requestHeader: new Headers(), values: createContextValues(), signal: { aborted: true } };
    await expect(t.obs.services.otlp.exportTraces({ bytes, format: 'protobuf' }, gone)).rejects.toThrow(/abandoned before its export was read/);
    expect(otlpDecodes()).toBe(0);
    expect(await rows(url)).toBe(0);
  });
});
