import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport, Http2SessionManager } from '@connectrpc/connect-node';
import { OTLPMetricExporter as GrpcMetricExporter } from '@opentelemetry/exporter-metrics-otlp-grpc';
import { AggregationTemporalityPreference, OTLPMetricExporter as JsonMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { OTLPMetricExporter as ProtoMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { CompressionAlgorithm } from '@opentelemetry/otlp-exporter-base';
import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import type { Attributes } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StatusSchema } from '../gen/google/rpc/status_pb.js';
import { ExportMetricsServiceRequestSchema, ExportMetricsServiceResponseSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceRequestSchema, ExportTraceServiceResponseSchema, TraceService } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { AggregationTemporality } from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { KeyValueSchema } from '../gen/opentelemetry/proto/common/v1/common_pb.js';
import { Span_SpanKind, Status_StatusCode } from '../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, foldRollups } from './support/db.js';
import { mcpMeter, recordingMetricExporter, recordingSpanExporter, sdkWarnings, sendToolCalls } from './support/otel.js';

// Issue 21: OpenTelemetry in. Real senders (the OpenTelemetry JS SDK and its stock OTLP
// exporters: protobuf over HTTP, JSON over HTTP, gRPC) export MCP client spans and the
// mcp.client.operation.duration histogram to a running service; the trust record shows them
// with the mapping of docs/telemetry.md.

const MAX_EXPORT = 256 * 1024;
let t: TestApp;

beforeAll(async () => {
  t = await startTestApp({ OTLP_JOIN_WINDOW_MS: '300', OTLP_MAX_EXPORT_BYTES: String(MAX_EXPORT) });
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

async function trust(url: string) {
  const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`);
  return { status: res.status, body: res.status === 200 ? await json(res) : null };
}

/** Polls until `check` passes (held spans are written when their join window ends). */
async function eventually(check: () => Promise<void>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function rows(serverUrl: string) {
  return t.obs.db.query<{ success: boolean; latency_ms: number; tool_name: string | null; http_status: number | null }>(
    'SELECT t.success, t.latency_ms, t.tool_name, t.http_status FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1 ORDER BY t.latency_ms',
    [serverUrl],
  );
}

const telemetryCount = async () => (await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry'))[0]!.n;

const hexId = (n: number, bytes: number) => Buffer.from(n.toString(16).padStart(bytes * 2, '0'), 'hex');
type Attr = MessageInitShape<typeof KeyValueSchema>;
const str = (key: string, v: string): Attr => ({ key, value: { value: { case: 'stringValue', value: v } } });
const int = (key: string, v: number): Attr => ({ key, value: { value: { case: 'intValue', value: BigInt(v) } } });

/** A raw span for hand-built exports: ids are small numbers, times in ms after a fixed start. */
function rawSpan(o: { trace: number; id: number; parent?: number; kind?: Span_SpanKind; startMs?: number; endMs: number; attrs: Attr[]; error?: boolean }) {
  const base = 1_760_000_000_000n * 1_000_000n;
  return {
    traceId: hexId(o.trace, 16),
    spanId: hexId(o.id, 8),
    parentSpanId: o.parent === undefined ? new Uint8Array() : hexId(o.parent, 8),
    name: 'span',
    kind: o.kind ?? Span_SpanKind.CLIENT,
    startTimeUnixNano: base + BigInt(o.startMs ?? 0) * 1_000_000n,
    endTimeUnixNano: base + BigInt(o.endMs) * 1_000_000n,
    attributes: o.attrs,
    status: o.error ? { code: Status_StatusCode.ERROR } : undefined,
  };
}

function traceExport(spans: ReturnType<typeof rawSpan>[], resource = 'raw-agent') {
  return toBinary(
    ExportTraceServiceRequestSchema,
    create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: [str('service.name', resource)] }, scopeSpans: [{ spans }] }] }),
  );
}

async function postOtlp(path: string, body: Uint8Array | string, headers: Record<string, string> = {}) {
  return fetch(`${t.base}${path}`, { method: 'POST', headers: { 'content-type': 'application/x-protobuf', ...headers }, body: Buffer.from(body) });
}

/** One gRPC call over a bare HTTP/2 stream (any bytes as the message); resolves to grpc-status. */
function rawGrpc(path: string, message: Buffer): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(t.base);
    session.on('error', reject);
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
    let status: string | undefined;
    req.on('response', (h) => (status = h['grpc-status'] as string | undefined));
    req.on('trailers', (h) => (status = h['grpc-status'] as string | undefined));
    req.on('data', () => {});
    req.on('end', () => {
      session.close();
      resolve(status);
    });
    req.on('error', reject);
    req.end(frame);
  });
}

async function expectOtlpStatus(res: Response, status: number, encoding: 'protobuf' | 'json' = 'protobuf') {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toContain(encoding === 'protobuf' ? 'application/x-protobuf' : 'application/json');
  const buf = Buffer.from(await res.arrayBuffer());
  const s = encoding === 'protobuf' ? fromBinary(StatusSchema, buf) : (JSON.parse(buf.toString()) as { message: string });
  expect(s.message.length).toBeGreaterThan(0);
  return s;
}

describe(`OTLP receivers with the OpenTelemetry JS SDK (${backend})`, () => {
  it('spans from the protobuf, JSON and gRPC exporters land as reports with the documented mapping', async () => {
    const PROTO = 'https://otlp-proto.example.com/mcp';
    const JSONS = 'https://otlp-json.example.com/mcp';
    const GRPC = 'https://otlp-grpc.example.com/mcp';

    const proto = recordingSpanExporter(new ProtoTraceExporter({ url: `${t.base}/v1/traces` }));
    await sendToolCalls(proto.exporter, [
      { url: PROTO, tool: 'get_forecast', latencyMs: 100 },
      { url: PROTO, tool: 'get_forecast', latencyMs: 200 },
      { url: PROTO, tool: 'get_alerts', latencyMs: 300, httpStatus: 200 },
      { url: PROTO, tool: 'get_alerts', latencyMs: 400, outcome: 'tool_error' },
    ]);
    expect(proto.ok()).toBe(true);

    const jsonx = recordingSpanExporter(new JsonTraceExporter({ url: `${t.base}/v1/traces`, compression: CompressionAlgorithm.GZIP }));
    await sendToolCalls(jsonx.exporter, [
      { url: JSONS, tool: 'search', latencyMs: 50 },
      { url: JSONS, tool: 'search', latencyMs: 150 },
      { url: JSONS, tool: 'search', latencyMs: 250, outcome: 'rpc_error', httpStatus: 502 },
    ]);
    expect(jsonx.ok()).toBe(true);

    // gzip over gRPC too (grpc-encoding: gzip): each encoding x compression the exporters offer is sent once here or below.
    const grpc = recordingSpanExporter(new GrpcTraceExporter({ url: t.base, compression: CompressionAlgorithm.GZIP }));
    await sendToolCalls(grpc.exporter, [
      { url: GRPC, tool: 'run_query', latencyMs: 80 },
      { url: GRPC, tool: 'run_query', latencyMs: 90 },
      { url: GRPC, tool: 'run_query', latencyMs: 100 },
    ]);
    expect(grpc.ok()).toBe(true);

    const p = await trust(PROTO);
    expect(p.status).toBe(200);
    expect(p.body.metrics.total_interactions).toBe(4);
    expect(p.body.metrics.success_rate).toBe(0.75);
    expect(p.body.metrics.avg_latency_ms).toBeCloseTo(250, 3);
    expect(await rows(PROTO)).toEqual([
      { success: true, latency_ms: 100, tool_name: 'get_forecast', http_status: 200 },
      { success: true, latency_ms: 200, tool_name: 'get_forecast', http_status: 200 },
      { success: true, latency_ms: 300, tool_name: 'get_alerts', http_status: 200 },
      { success: false, latency_ms: 400, tool_name: 'get_alerts', http_status: 200 },
    ]);

    const j = await trust(JSONS);
    expect(j.body.metrics.total_interactions).toBe(3);
    expect(j.body.metrics.success_rate).toBeCloseTo(2 / 3, 6);
    expect((await rows(JSONS)).map((r) => [r.success, r.latency_ms, r.http_status])).toEqual([
      [true, 50, 200],
      [true, 150, 200],
      [false, 250, 502],
    ]);

    const g = await trust(GRPC);
    expect(g.body.metrics.total_interactions).toBe(3);
    expect(g.body.metrics.avg_latency_ms).toBeCloseTo(90, 3);

    // The initialize span and the chat span are not tool calls: OTLP partial success, which the
    // stock exporters log as a warning (and never retry).
    expect(sdkWarnings.some((w) => w.includes('Partial Success') && w.includes('not MCP client tool calls'))).toBe(true);
  }, 60_000);

  it('attribute values of any kind (3.x: bytes, maps, empty values, mixed arrays) are read past, in protobuf, OTLP/JSON and gRPC', async () => {
    // Since @opentelemetry/api 1.10 / SDK 3.x an attribute is any OTLP AnyValue: the 2.x SDK dropped
    // these, the 3.x exporters send bytesValue (base64 in OTLP/JSON), kvlistValue, an AnyValue with
    // no value ({} in JSON) and arrays of mixed kinds. Only the mapped keys' scalars are read; a
    // mapped key with a value of another kind counts as absent.
    const anyValues = (tag: string): Attributes => ({
      'custom.bytes': new Uint8Array([0, 1, 2, 0xfe, 0xff]),
      'custom.map': { tag, nested: { n: 1, flags: [true, 'mixed', 2.5, null] } },
      'custom.empty': null,
      'custom.mixed': ['a', 1, false, new Uint8Array([7])],
      'error.type': null,
    });
    const kinds = [
      ['proto', (u: string) => new ProtoTraceExporter({ url: u })],
      ['json', (u: string) => new JsonTraceExporter({ url: u })],
      ['grpc', () => new GrpcTraceExporter({ url: t.base })],
    ] as const;
    for (const [kind, make] of kinds) {
      const SERVER = `https://otlp-anyvalue-${kind}.example.com/mcp`;
      const rec = recordingSpanExporter(make(`${t.base}/v1/traces`));
      await sendToolCalls(
        rec.exporter,
        [
          { url: SERVER, tool: 'any_tool', latencyMs: 30, extra: anyValues(kind) },
          { url: SERVER, tool: 'any_tool', latencyMs: 60, extra: { ...anyValues(kind), 'gen_ai.tool.name': { name: 'not a string' } }, outcome: 'tool_error' },
        ],
        { unrelated: false },
      );
      expect(rec.ok(), kind).toBe(true);
      // The SDK kept them (the exporter was handed them to encode).
      const mcp = rec.spans.filter((x) => x.attributes['mcp.method.name'] === 'tools/call');
      expect(mcp).toHaveLength(2);
      expect(mcp[0]!.attributes['custom.bytes']).toBeInstanceOf(Uint8Array);
      expect(mcp[0]!.attributes['custom.map']).toEqual({ tag: kind, nested: { n: 1, flags: [true, 'mixed', 2.5, null] } });
      expect(mcp[0]!.attributes['custom.empty']).toBeNull();
      expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms, r.tool_name])).toEqual([
        [true, 30, 'any_tool'],
        [false, 60, null],
      ]);
    }
  }, 60_000);

  it('an integer attribute beyond int64 (the JSON exporter writes it as a bare JSON number) does not cost the export its tool calls', async () => {
    // The stock OTLP/JSON exporters (2.x and 3.x alike) write every integer-valued number as
    // {"intValue": <number>}: 2 ** 64 or 1e21 are out of int64's range, which the proto3 JSON
    // mapping refuses. The binary exporters send such a value wrapped, and it is read past like any
    // attribute the mapping does not use; over JSON the whole export was refused 400 (not retried),
    // with every tool call in it.
    const SERVER = 'https://otlp-huge-int.example.com/mcp';
    const HOST = 'otlp-huge-int-metrics.example.com';
    const huge = { 'app.bytes.total': 2 ** 64, 'app.ratio.max': 1e21, 'app.floor': -(2 ** 63) - 4096 };
    const spans = recordingSpanExporter(new JsonTraceExporter({ url: `${t.base}/v1/traces` }));
    // The SDK's flush rejects with a failed export's error; the recorded result is what is checked.
    await sendToolCalls(spans.exporter, [{ url: SERVER, tool: 'huge_tool', latencyMs: 45, extra: huge }], { unrelated: false }).catch(() => {});
    expect(spans.results.map((r) => r.error?.message ?? 'ok')).toEqual(['ok']);
    expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms, r.tool_name])).toEqual([[true, 45, 'huge_tool']]);

    const points = recordingMetricExporter(new JsonMetricExporter({ url: `${t.base}/v1/metrics`, temporalityPreference: AggregationTemporalityPreference.DELTA }));
    const meter = mcpMeter(points.exporter, { 'service.instance.id': 'huge-int' });
    meter.record(0.3, { 'gen_ai.tool.name': 'huge_tool', 'server.address': HOST, ...huge });
    await meter.flush().catch(() => {});
    await meter.shutdown().catch(() => {});
    expect(points.results.map((r) => r.error?.message ?? 'ok')).toEqual(['ok']);
    expect((await trust(`https://${HOST}`)).body?.metrics.total_interactions).toBe(1);

    // An integer gauge or sum point beyond int64 (asInt) in the same export is read past as well.
    const gauge = {
      resourceMetrics: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'huge-int-gauge' } }] },
          scopeMetrics: [{ metrics: [{ name: 'app.disk.bytes', gauge: { dataPoints: [{ asInt: 1e21, timeUnixNano: '1760000000000000000' }] } }] }],
        },
      ],
    };
    const g = await postJson(`${t.base}/v1/metrics`, gauge);
    expect(g.status).toBe(200);
    expect(((await g.json()) as { partialSuccess: { rejectedDataPoints: string } }).partialSuccess.rejectedDataPoints).toBe('1');
    // A value that is not a number at all is still malformed.
    const bad = await postJson(`${t.base}/v1/metrics`, { resourceMetrics: [{ scopeMetrics: [{ metrics: [{ name: 'x', gauge: { dataPoints: [{ asInt: 'many' }] } }] }] }] });
    expect(bad.status).toBe(400);
  });

  it('answers partial success with exact counts, in protobuf and in OTLP/JSON', async () => {
    const tool = [str('mcp.method.name', 'tools/call'), str('gen_ai.tool.name', 'lookup')];
    const body = traceExport([
      rawSpan({ trace: 1, id: 1, endMs: 40, attrs: [...tool, str('url.full', 'https://partial.example.com/mcp')] }),
      rawSpan({ trace: 1, id: 2, endMs: 60, attrs: [...tool, str('url.full', 'https://partial.example.com/mcp')], error: true }),
      rawSpan({ trace: 1, id: 3, endMs: 5, attrs: [str('mcp.method.name', 'initialize')] }),
      rawSpan({ trace: 1, id: 4, endMs: 5, attrs: [...tool], kind: Span_SpanKind.SERVER }),
      rawSpan({ trace: 1, id: 5, startMs: 50, endMs: 10, attrs: [...tool, str('url.full', 'https://partial.example.com/mcp')] }),
      rawSpan({ trace: 1, id: 6, endMs: 10, attrs: [...tool, str('url.full', 'ftp://partial.example.com/mcp')] }),
    ]);
    const res = await postOtlp('/v1/traces', body);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('application/x-protobuf');
    const answer = fromBinary(ExportTraceServiceResponseSchema, Buffer.from(await res.arrayBuffer()));
    // initialize, the SERVER span, the negative duration, the ftp URL (names no server).
    expect(answer.partialSuccess?.rejectedSpans).toBe(4n);
    expect(answer.partialSuccess?.errorMessage).toMatch(/4 of 6 spans were not recorded/);
    const stored = await rows('https://partial.example.com/mcp');
    expect(stored.map((r) => [r.success, r.latency_ms, r.tool_name])).toEqual([
      [true, 40, 'lookup'],
      [false, 60, 'lookup'],
    ]);

    // The same export as OTLP/JSON (hex ids, integer enums, string int64s) answers in JSON.
    const jsonBody = {
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'json-agent' } }] },
          scopeSpans: [
            {
              spans: [
                {
                  traceId: '5B8EFFF798038103D269B633813FC60C',
                  spanId: 'EEE19B7EC3C1B174',
                  name: 'tools/call lookup',
                  kind: 3,
                  startTimeUnixNano: '1760000000000000000',
                  endTimeUnixNano: '1760000000075000000',
                  attributes: [
                    { key: 'mcp.method.name', value: { stringValue: 'tools/call' } },
                    { key: 'gen_ai.tool.name', value: { stringValue: 'lookup' } },
                    { key: 'url.full', value: { stringValue: 'https://partial-json.example.com/mcp' } },
                  ],
                  someFutureField: { ignored: true },
                },
                { traceId: '5B8EFFF798038103D269B633813FC60C', spanId: 'EEE19B7EC3C1B175', name: 'GET', kind: 3, startTimeUnixNano: '1', endTimeUnixNano: '2' },
              ],
            },
          ],
        },
      ],
    };
    const jr = await postJson(`${t.base}/v1/traces`, jsonBody);
    expect(jr.status).toBe(200);
    expect(jr.headers.get('content-type')).toContain('application/json');
    expect(await jr.json()).toEqual({ partialSuccess: { rejectedSpans: '1', errorMessage: expect.stringContaining('1 of 2 spans') } });
    expect((await rows('https://partial-json.example.com/mcp')).map((r) => r.latency_ms)).toEqual([75]);

    // Full success leaves partial_success unset.
    const clean = await postOtlp('/v1/traces', traceExport([rawSpan({ trace: 2, id: 1, endMs: 33, attrs: [...tool, str('url.full', 'https://partial.example.com/mcp')] })]));
    expect(fromBinary(ExportTraceServiceResponseSchema, Buffer.from(await clean.arrayBuffer())).partialSuccess).toBeUndefined();
  });

  it('joins an MCP span with its HTTP child from another export, and falls back to server.address matched to a tracked server', async () => {
    const mcp = [str('mcp.method.name', 'tools/call'), str('gen_ai.tool.name', 'join_tool')];
    // The HTTP child arrives first (it ended first), alone: held, and said to be unused for now.
    const first = await postOtlp(
      '/v1/traces',
      traceExport([rawSpan({ trace: 7, id: 71, parent: 70, startMs: 2, endMs: 40, attrs: [str('url.full', 'https://joined.example.com/mcp?session=abc'), int('http.response.status_code', 503)] })]),
    );
    expect(fromBinary(ExportTraceServiceResponseSchema, Buffer.from(await first.arrayBuffer())).partialSuccess?.rejectedSpans).toBe(1n);
    // Its parent in the next export: one report, server and status from the child (query dropped).
    const second = await postOtlp('/v1/traces', traceExport([rawSpan({ trace: 7, id: 70, endMs: 45, attrs: [...mcp, str('server.address', 'elsewhere.example.com')], error: true })]));
    expect(fromBinary(ExportTraceServiceResponseSchema, Buffer.from(await second.arrayBuffer())).partialSuccess).toBeUndefined();
    expect(await rows('https://joined.example.com/mcp')).toEqual([{ success: false, latency_ms: 45, tool_name: 'join_tool', http_status: 503 }]);

    // No child at all: after the join window, server.address + server.port name a tracked server.
    const tracked = 'https://tracked-host.example.com/v2/mcp';
    expect((await postJson(`${t.base}/api/report`, { server_url: tracked, success: true, latency_ms: 10 })).status).toBe(200);
    await postOtlp('/v1/traces', traceExport([rawSpan({ trace: 8, id: 80, endMs: 70, attrs: [...mcp, str('server.address', 'Tracked-Host.example.com'), int('server.port', 443)] })]));
    // ...or, when no tracked server lives there, the origin (https unless the port is 80).
    await postOtlp('/v1/traces', traceExport([rawSpan({ trace: 9, id: 90, endMs: 20, attrs: [...mcp, str('server.address', 'fresh-origin.example.com'), int('server.port', 8443)] })]));
    await eventually(async () => {
      expect((await trust(tracked)).body?.metrics.total_interactions).toBe(2);
      expect((await trust('https://fresh-origin.example.com:8443')).body?.metrics.total_interactions).toBe(1);
    });
    expect((await rows(tracked)).map((r) => r.latency_ms)).toEqual([10, 70]);

    // The same span exported twice (an exporter retry) counts once.
    const again = traceExport([rawSpan({ trace: 10, id: 100, endMs: 12, attrs: [...mcp, str('url.full', 'https://retried.example.com/mcp')] })]);
    await postOtlp('/v1/traces', again);
    await postOtlp('/v1/traces', again);
    expect(await rows('https://retried.example.com/mcp')).toHaveLength(1);
  }, 60_000);

  it('mcp.client.operation.duration: cumulative points become deltas (a re-export adds nothing), with bucket latencies', async () => {
    const HOST = 'metrics-proto.example.com';
    const SERVER = `https://${HOST}`;
    const proto = recordingMetricExporter(new ProtoMetricExporter({ url: `${t.base}/v1/metrics`, compression: CompressionAlgorithm.GZIP }));
    const meter = mcpMeter(proto.exporter, { 'service.instance.id': 'metrics-proto' });
    meter.record(0.12, { 'gen_ai.tool.name': 'm_tool', 'server.address': HOST, 'server.port': 443 });
    meter.record(0.12, { 'gen_ai.tool.name': 'm_tool', 'server.address': HOST, 'server.port': 443 });
    meter.recordUnrelated();
    await meter.flush();
    // Every bucket holds one kind of call here, so the exact mean (sum / count) is used: 120 ms.
    expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms, r.tool_name])).toEqual([
      [true, 120, 'm_tool'],
      [true, 120, 'm_tool'],
    ]);
    await meter.flush(); // the same cumulative point again: nothing new
    expect(await rows(SERVER)).toHaveLength(2);
    meter.record(0.7, { 'gen_ai.tool.name': 'm_tool', 'server.address': HOST, 'server.port': 443 });
    meter.record(3, { 'gen_ai.tool.name': 'm_tool', 'server.address': HOST, 'server.port': 443, 'error.type': 'tool_error' });
    await meter.flush();
    // The 0.7 s call alone in its bucket (0.5, 1] -> exact 700 ms; the failed 3 s call alone in (2, 5].
    expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms])).toEqual([
      [true, 120],
      [true, 120],
      [true, 700],
      [false, 3000],
    ]);
    await meter.shutdown();
    expect(proto.ok()).toBe(true);

    // Delta temporality over JSON, and gRPC: two calls in two buckets get the bucket midpoints.
    const JHOST = 'metrics-json.example.com';
    const jsonx = recordingMetricExporter(new JsonMetricExporter({ url: `${t.base}/v1/metrics`, temporalityPreference: AggregationTemporalityPreference.DELTA }));
    const jm = mcpMeter(jsonx.exporter, { 'service.instance.id': 'metrics-json' });
    jm.record(0.03, { 'gen_ai.tool.name': 'j_tool', 'server.address': JHOST });
    jm.record(0.3, { 'gen_ai.tool.name': 'j_tool', 'server.address': JHOST });
    await jm.flush();
    await jm.flush(); // delta: an empty interval, nothing new
    await jm.shutdown();
    expect((await rows(`https://${JHOST}`)).map((r) => r.latency_ms)).toEqual([35, 350]);
    expect(jsonx.ok()).toBe(true);

    const GHOST = 'metrics-grpc.example.com';
    const grpc = recordingMetricExporter(new GrpcMetricExporter({ url: t.base }));
    const gm = mcpMeter(grpc.exporter, { 'service.instance.id': 'metrics-grpc' });
    gm.record(0.05, { 'gen_ai.tool.name': 'g_tool', 'server.address': GHOST });
    await gm.flush();
    await gm.shutdown();
    expect(grpc.ok()).toBe(true);
    expect((await trust(`https://${GHOST}`)).body.metrics.total_interactions).toBe(1);
  }, 60_000);

  it('a resource that exports MCP spans has its duration metric ignored (no double counting)', async () => {
    const resource = 'both-signals-agent';
    const SERVER = 'https://both.example.com/mcp';
    await postOtlp(
      '/v1/traces',
      traceExport([rawSpan({ trace: 20, id: 1, endMs: 30, attrs: [str('mcp.method.name', 'tools/call'), str('url.full', SERVER)] })], resource),
    );
    const point = (attrs: Attr[]) => ({
      attributes: [str('mcp.method.name', 'tools/call'), ...attrs],
      startTimeUnixNano: 1n,
      timeUnixNano: BigInt(Date.now()) * 1_000_000n,
      count: 1n,
      sum: 0.03,
      bucketCounts: [0n, 1n],
      explicitBounds: [0.01],
    });
    const metrics = (service: string) =>
      toBinary(
        ExportMetricsServiceRequestSchema,
        create(ExportMetricsServiceRequestSchema, {
          resourceMetrics: [
            {
              resource: { attributes: [str('service.name', service)] },
              scopeMetrics: [
                {
                  metrics: [
                    {
                      name: 'mcp.client.operation.duration',
                      unit: 's',
                      data: { case: 'histogram', value: { aggregationTemporality: AggregationTemporality.DELTA, dataPoints: [point([str('url.full', SERVER)])] } },
                    },
                  ],
                },
              ],
            },
          ],
        }),
      );
    const res = await postOtlp('/v1/metrics', metrics(resource));
    const answer = fromBinary(ExportMetricsServiceResponseSchema, Buffer.from(await res.arrayBuffer()));
    expect(answer.partialSuccess?.rejectedDataPoints).toBe(1n);
    expect(answer.partialSuccess?.errorMessage).toMatch(/also exports MCP tool-call spans/);
    expect(await rows(SERVER)).toHaveLength(1);
    // Another resource's point is counted.
    const other = await postOtlp('/v1/metrics', metrics('metrics-only-agent'));
    expect(fromBinary(ExportMetricsServiceResponseSchema, Buffer.from(await other.arrayBuffer())).partialSuccess).toBeUndefined();
    expect(await rows(SERVER)).toHaveLength(2);
  });

  it('reports from an exporter weigh as the same source as REST reports from the same key or address', async () => {
    const reg = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' });
    const key = (await json(reg)).api_key as string;
    const KEYED = 'https://source-key.example.com/mcp';
    const ANON = 'https://source-addr.example.com/mcp';
    await postJson(`${t.base}/api/report`, { server_url: KEYED, success: true, latency_ms: 10 }, { authorization: `Bearer ${key}` });
    const keyed = recordingSpanExporter(new ProtoTraceExporter({ url: `${t.base}/v1/traces`, headers: { authorization: `Bearer ${key}` } }));
    await sendToolCalls(keyed.exporter, [{ url: KEYED, tool: 'a', latencyMs: 20 }], { unrelated: false });
    await postJson(`${t.base}/api/report`, { server_url: ANON, success: true, latency_ms: 10 });
    const anon = recordingSpanExporter(new JsonTraceExporter({ url: `${t.base}/v1/traces` }));
    await sendToolCalls(anon.exporter, [{ url: ANON, tool: 'a', latencyMs: 20 }], { unrelated: false });
    await foldRollups(t.obs.db);
    const sources = async (url: string) =>
      (await t.obs.db.query<{ source: string; reports: number }>('SELECT e.source, e.reports FROM trust_evidence e JOIN servers s ON s.id = e.server_id WHERE s.url = $1', [url])).map(
        (r) => [r.source.split(':')[0], r.reports],
      );
    expect(await sources(KEYED)).toEqual([['key', 2]]);
    expect(await sources(ANON)).toEqual([['addr', 2]]);
  }, 60_000);

  it('malformed, oversized and unsupported exports get the OTLP error, never a 5xx, and nothing is stored', async () => {
    const before = await telemetryCount();
    const valid = traceExport([rawSpan({ trace: 30, id: 1, endMs: 30, attrs: [str('mcp.method.name', 'tools/call'), str('url.full', 'https://never.example.com/mcp')] })]);

    await expectOtlpStatus(await postOtlp('/v1/traces', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01])), 400);
    await expectOtlpStatus(await postOtlp('/v1/metrics', 'not protobuf at all'), 400);
    await expectOtlpStatus(await postOtlp('/v1/traces', '{"resourceSpans": [', { 'content-type': 'application/json' }), 400, 'json');
    await expectOtlpStatus(await postOtlp('/v1/traces', '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"not-hex"}]}]}]}', { 'content-type': 'application/json' }), 400, 'json');
    await expectOtlpStatus(await postOtlp('/v1/traces', '[1,2]', { 'content-type': 'application/json' }), 400, 'json');
    await expectOtlpStatus(await postOtlp('/v1/traces', 'hello', { 'content-type': 'text/plain' }), 415);
    await expectOtlpStatus(await postOtlp('/v1/traces', valid, { 'content-encoding': 'br' }), 415);
    await expectOtlpStatus(await postOtlp('/v1/traces', Buffer.from('not gzip'), { 'content-encoding': 'gzip' }), 400);
    // Larger than OTLP_MAX_EXPORT_BYTES as sent...
    await expectOtlpStatus(await postOtlp('/v1/traces', Buffer.alloc(MAX_EXPORT + 1, 1)), 413);
    // ...and a small gzip body that inflates past it (a decompression bomb) is cut off at the limit.
    const bomb = gzipSync(Buffer.alloc(64 * MAX_EXPORT, 0));
    expect(bomb.length).toBeLessThan(MAX_EXPORT / 4);
    const s = await expectOtlpStatus(await postOtlp('/v1/traces', bomb, { 'content-encoding': 'gzip' }), 413);
    expect(s.message).toMatch(/after decompression/);
    // A valid gzip export is fine (the bomb's refusal is about size, not gzip).
    expect((await postOtlp('/v1/metrics', gzipSync(toBinary(ExportMetricsServiceRequestSchema, create(ExportMetricsServiceRequestSchema, {}))), { 'content-encoding': 'gzip' })).status).toBe(200);

    // OTLP/gRPC: too large is RESOURCE_EXHAUSTED, undecodable is INVALID_ARGUMENT.
    // Its own HTTP/2 session, aborted at the end: after a refused oversized message connect-node
    // leaves the request half-sent, which would hold the server's graceful close open.
    const session = new Http2SessionManager(t.base);
    const client = createClient(TraceService, createGrpcTransport({ baseUrl: t.base, sessionManager: session }));
    const huge = fromBinary(ExportTraceServiceRequestSchema, valid);
    huge.resourceSpans[0]!.resource!.attributes.push(create(KeyValueSchema, str('padding', 'x'.repeat(MAX_EXPORT))));
    const tooLarge = await client.export(huge).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(tooLarge?.code).toBe(Code.ResourceExhausted);
    session.abort();
    expect(await rawGrpc('/opentelemetry.proto.collector.trace.v1.TraceService/Export', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]))).toBe(String(Code.InvalidArgument));
    expect(await rawGrpc('/opentelemetry.proto.collector.metrics.v1.MetricsService/Export', Buffer.from('garbage!'))).toBe(String(Code.InvalidArgument));
    const res = await fetch(`${t.base}/opentelemetry.proto.collector.trace.v1.TraceService/Export`, {
      method: 'POST',
      headers: { 'content-type': 'application/proto', 'connect-protocol-version': '1' },
      body: Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string }).code).toBe('invalid_argument');
    // The same for every Connect method, not only OTLP's (connect-es alone answers 500 Internal).
    const own = await fetch(`${t.base}/observatory.v1.TelemetryService/Report`, {
      method: 'POST',
      headers: { 'content-type': 'application/proto', 'connect-protocol-version': '1' },
      body: Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
    });
    expect(own.status).toBe(400);
    await own.arrayBuffer();

    // GET on the path: 405 with Allow, like every other route.
    expect((await fetch(`${t.base}/v1/traces`)).status).toBe(405);
    expect(await telemetryCount()).toBe(before);
  });

  it('counts what it received on /metrics, by fixed outcome words only', async () => {
    const text = await (await fetch(`${t.base}/metrics`)).text();
    expect(text).toMatch(/observatory_otlp_items_total\{signal="traces",outcome="report"\} \d+/);
    expect(text).toMatch(/observatory_otlp_items_total\{signal="traces",outcome="ignored"\} \d+/);
    expect(text).toMatch(/observatory_otlp_items_total\{signal="metrics",outcome="report"\} \d+/);
  });
});
