// Real OpenTelemetry JS SDK senders for the OTLP receiver tests: a TracerProvider with a stock
// OTLP exporter that emits MCP client spans as the MCP semantic conventions describe them, and a
// MeterProvider that records mcp.client.operation.duration. Each takes the SDK line to build them
// from (OtelSdk): the current 3.x line by default, the 2.x line (npm aliases *-v2 in package.json)
// in test/otlp.sdk-v2.test.ts. Both lines share the one @opentelemetry/api (1.10, an npm override:
// the 2.x packages ask for <1.10, and a tree holds one api at its root).
import http2 from 'node:http2';
import { fromBinary } from '@bufbuild/protobuf';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, diag, trace, type Attributes, type Meter, type Tracer } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AggregationType, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { RetryInfoSchema } from '../../gen/google/rpc/error_details_pb.js';
import { StatusSchema, type Status } from '../../gen/google/rpc/status_pb.js';
import { eventually, rawGet } from './connections.js';

/**
 * The SDK classes the senders are built from, one line of the OpenTelemetry JS SDK. Typed by what
 * the senders use: the two lines' own types (ReadableSpan, ExportResultCode ...) are distinct.
 */
export interface OtelSdk {
  line: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  resourceFromAttributes(attributes: Attributes): any;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  TracerProvider: new (config: { resource: any; spanProcessors: any[] }) => { getTracer(name: string, version?: string): Tracer; forceFlush(): Promise<void>; shutdown(): Promise<void> };
  BatchSpanProcessor: new (config: { exporter: Exporter; maxExportBatchSize?: number; maxQueueSize?: number; scheduledDelayMillis?: number }) => object;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  MeterProvider: new (config: { resource: any; readers: any[]; views?: any[] }) => { getMeter(name: string, version?: string): Meter; forceFlush(): Promise<void>; shutdown(): Promise<void> };
  PeriodicExportingMetricReader: new (config: { exporter: MetricExporter; exportIntervalMillis?: number }) => object;
}

/** The current line (@opentelemetry/sdk-trace 3.x, exporters 0.30x). */
export const SDK_3: OtelSdk = { line: '3.x', resourceFromAttributes, TracerProvider, BatchSpanProcessor, MeterProvider, PeriodicExportingMetricReader };

/** An export's result as either line reports it (its ExportResultCode values are the same numbers). */
export interface Result {
  code: number;
  error?: Error;
}

/** A span or metric exporter of either line. */
export interface Exporter {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  export(items: any, done: (r: Result) => void): void;
  shutdown(): Promise<void>;
  forceFlush?(): Promise<void>;
}

/** A push metric exporter of either line. */
export interface MetricExporter extends Exporter {
  forceFlush(): Promise<void>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  selectAggregationTemporality?(instrumentType: any): any;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  selectAggregation?(instrumentType: any): any;
}

/** Warnings the SDK logs (the exporters log an OTLP partial success there). */
export const sdkWarnings: string[] = [];
/** The delays (ms) the HTTP exporters scheduled their retries with: a Retry-After they read, or their own backoff. */
export const sdkRetryDelaysMs: number[] = [];
const text = (m: string, a: unknown[]) => `${m} ${a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' ')}`;
diag.setLogger(
  {
    error: (m: string, ...a: unknown[]) => void sdkWarnings.push(`error: ${text(m, a)}`),
    warn: (m: string, ...a: unknown[]) => void sdkWarnings.push(`warn: ${text(m, a)}`),
    info: () => {},
    debug: () => {},
    // otlp-exporter-base's RetryingTransport, both lines: `Scheduling export retry in ${ms}ms`.
    verbose: (m: string) => {
      const retry = /^Scheduling export retry in (\d+)ms/.exec(m);
      if (retry) sdkRetryDelaysMs.push(Number(retry[1]));
    },
  },
  DiagLogLevel.VERBOSE,
);

/** Wraps an exporter so a test sees every export's result (an SDK pipeline otherwise swallows failures). */
export function recordingSpanExporter(inner: Exporter) {
  const results: Result[] = [];
  /** The spans handed to the exporter, as the SDK made them (their attributes before encoding). */
  const spans: { attributes: Attributes }[] = [];
  const exporter: Exporter = {
    export: (batch, done) => {
      spans.push(...batch);
      inner.export(batch, (r) => {
        results.push(r);
        done(r);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
  return { exporter, results, spans, ok: () => results.length > 0 && results.every((r) => r.code === ExportResultCode.SUCCESS) };
}

export function recordingMetricExporter(inner: MetricExporter) {
  const results: Result[] = [];
  /** The ResourceMetrics handed to the exporter, as the SDK made them (before encoding). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const exported: any[] = [];
  const exporter: MetricExporter = {
    export: (m, done) => {
      exported.push(m);
      inner.export(m, (r) => {
        results.push(r);
        done(r);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush(),
    ...(typeof inner.selectAggregationTemporality === 'function' ? { selectAggregationTemporality: inner.selectAggregationTemporality.bind(inner) } : {}),
    ...(typeof inner.selectAggregation === 'function' ? { selectAggregation: inner.selectAggregation.bind(inner) } : {}),
  };
  return { exporter, results, exported, ok: () => results.length > 0 && results.every((r) => r.code === ExportResultCode.SUCCESS) };
}

export interface ToolCall {
  /** The MCP endpoint the HTTP child span posts to (url.full); null: no HTTP child span. */
  url: string | null;
  tool: string;
  latencyMs: number;
  /** 'ok', a JSON-RPC error, or a tool result with isError (error.type tool_error). */
  outcome?: 'ok' | 'rpc_error' | 'tool_error';
  httpStatus?: number;
  /** Attributes on the MCP span beyond the conventional ones (the privacy test's markers). */
  extra?: Attributes;
  /** server.address / server.port on the MCP span. */
  serverAddress?: string;
  serverPort?: number;
  /** Attributes on the HTTP child span beyond the conventional ones. */
  childExtra?: Attributes;
}

/**
 * Emits MCP client `tools/call` spans (kind CLIENT, mcp.method.name, gen_ai.tool.name, error.type,
 * status) with their HTTP client child span (url.full, http.response.status_code), plus an
 * `initialize` span and an unrelated span, through a BatchSpanProcessor, then flushes.
 */
export async function sendToolCalls(
  exporter: Exporter,
  calls: readonly ToolCall[],
  opts: { resource?: Attributes; unrelated?: boolean; sdk?: OtelSdk } = {},
): Promise<void> {
  const sdk = opts.sdk ?? SDK_3;
  const provider = new sdk.TracerProvider({
    resource: sdk.resourceFromAttributes({ 'service.name': 'otlp-test-agent', ...opts.resource }),
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter, maxExportBatchSize: 2048, maxQueueSize: 4096, scheduledDelayMillis: 60_000 })],
  });
  const tracer = provider.getTracer('mcp-client-instrumentation', '1.0.0');
  const t0 = Date.now() - 60_000;
  calls.forEach((c, i) => {
    const start = t0 + i * 5;
    const outcome = c.outcome ?? 'ok';
    const span = tracer.startSpan(
      `tools/call ${c.tool}`,
      {
        kind: SpanKind.CLIENT,
        startTime: start,
        attributes: {
          'mcp.method.name': 'tools/call',
          'gen_ai.tool.name': c.tool,
          'gen_ai.operation.name': 'execute_tool',
          'mcp.protocol.version': '2025-06-18',
          'network.transport': 'tcp',
          'jsonrpc.request.id': String(i + 2),
          ...(c.serverAddress !== undefined ? { 'server.address': c.serverAddress } : {}),
          ...(c.serverPort !== undefined ? { 'server.port': c.serverPort } : {}),
          ...c.extra,
        },
      },
      ROOT_CONTEXT,
    );
    if (c.url !== null) {
      const child = tracer.startSpan(
        'POST',
        {
          kind: SpanKind.CLIENT,
          startTime: start + Math.min(1, c.latencyMs / 4),
          attributes: { 'http.request.method': 'POST', 'url.full': c.url, 'http.response.status_code': c.httpStatus ?? 200, ...c.childExtra },
        },
        trace.setSpan(ROOT_CONTEXT, span),
      );
      child.end(start + c.latencyMs * 0.9);
    }
    if (outcome === 'rpc_error') {
      span.setAttribute('error.type', '-32603');
      span.setAttribute('rpc.response.status_code', '-32603');
      span.setStatus({ code: SpanStatusCode.ERROR, message: 'Internal error' });
    } else if (outcome === 'tool_error') {
      span.setAttribute('error.type', 'tool_error');
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end(start + c.latencyMs);
  });
  // What every agent also emits: an MCP initialize span and spans that are no MCP call at all.
  tracer.startSpan('initialize', { kind: SpanKind.CLIENT, attributes: { 'mcp.method.name': 'initialize' } }, ROOT_CONTEXT).end();
  if (opts.unrelated !== false) tracer.startSpan('chat gpt-x', { kind: SpanKind.CLIENT, attributes: { 'gen_ai.operation.name': 'chat' } }, ROOT_CONTEXT).end();
  await provider.forceFlush();
  await provider.shutdown();
}

export const MCP_DURATION_BUCKETS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300];

/**
 * A MeterProvider recording mcp.client.operation.duration (seconds, the conventions' buckets).
 * `exponential`: a View gives the histogram OpenTelemetry's base2 exponential bucket aggregation
 * instead (`maxSize` buckets, 160 by default; the SDK starts at scale 20 and scales down to fit).
 */
export function mcpMeter(exporter: MetricExporter, resource: Attributes, sdk: OtelSdk = SDK_3, opts: { exponential?: { maxSize?: number } } = {}) {
  const reader = new sdk.PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  // AggregationType.EXPONENTIAL_HISTOGRAM is 5 in both SDK lines.
  const views = opts.exponential
    ? [{ instrumentName: 'mcp.client.operation.duration', aggregation: { type: AggregationType.EXPONENTIAL_HISTOGRAM, options: { maxSize: opts.exponential.maxSize ?? 160 } } }]
    : [];
  const provider = new sdk.MeterProvider({ resource: sdk.resourceFromAttributes({ 'service.name': 'otlp-test-agent', ...resource }), readers: [reader], views });
  const meter = provider.getMeter('mcp-client-instrumentation', '1.0.0');
  const duration = meter.createHistogram('mcp.client.operation.duration', { unit: 's', advice: { explicitBucketBoundaries: MCP_DURATION_BUCKETS } });
  const unrelated = meter.createCounter('http.client.request.count');
  return {
    record: (seconds: number, attributes: Attributes) => duration.record(seconds, { 'mcp.method.name': 'tools/call', ...attributes }),
    recordUnrelated: () => unrelated.add(1, { 'http.request.method': 'GET' }),
    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
}

// Throttled exports: what the stock exporters see of a refusal that says when to retry.

const MiB = 1024 * 1024;
const bodyGauge = async (port: number, state: string) => Number(new RegExp(`observatory_http_request_body_bytes\\{state="${state}"\\} (\\d+)`).exec(await rawGet(port, '/metrics'))?.[1] ?? NaN);
const bodyRefusals = async (port: number) => Number(/observatory_http_request_body_refused_total\{over="per_client"\} (\d+)/.exec(await rawGet(port, '/metrics'))?.[1] ?? NaN);

/**
 * Holds this client network's whole share of the request body budget until release(): an
 * OTLP/HTTP export over HTTP/2 that declares no length (it reserves the route's 4 MiB) and is
 * never finished. In an app started with HTTP_BODY_BUDGET_BYTES=33554432 (a share is one 4 MiB
 * export), every export from the network meanwhile is refused: 429 / RESOURCE_EXHAUSTED with
 * Retry-After and a google.rpc.RetryInfo of the same delay (src/http/body-budget.ts).
 */
export async function holdBodyShare(base: string): Promise<{ release(): Promise<void> }> {
  const port = Number(new URL(base).port);
  const session = http2.connect(base);
  session.on('error', () => {});
  const stream = session.request({ ':method': 'POST', ':path': '/v1/traces', 'content-type': 'application/x-protobuf' });
  stream.on('error', () => {});
  stream.write(Buffer.alloc(1024));
  if (!(await eventually(async () => (await bodyGauge(port, 'held')) >= 4 * MiB, 10_000))) throw new Error('the export holding the share was not reserved');
  return {
    async release() {
      session.destroy();
      if (!(await eventually(async () => (await bodyGauge(port, 'held')) < 4 * MiB, 10_000))) throw new Error('the held share was not released');
    },
  };
}

/**
 * Exports `calls` through an HTTP exporter while the network's share of the body budget is held,
 * and releases it once the export was refused: a stock exporter that reads the 429's Retry-After
 * retries after it and lands. Returns the Retry-After the service sent (ms; read from a refusal
 * of the same kind first) and the retry delays (ms) the exporter scheduled meanwhile.
 */
export async function exportThrottled(base: string, exporter: Exporter, calls: readonly ToolCall[], sdk: OtelSdk = SDK_3): Promise<{ retryAfterMs: number; retryDelaysMs: number[] }> {
  const port = Number(new URL(base).port);
  const hold = await holdBodyShare(base);
  let sending: Promise<void> | null = null;
  let retryAfterMs = NaN;
  const delaysBefore = sdkRetryDelaysMs.length;
  try {
    const probe = await fetch(`${base}/v1/traces`, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: new Uint8Array([0x0a, 0x00]) });
    await probe.arrayBuffer();
    if (probe.status !== 429) throw new Error(`the held share did not refuse an export (${probe.status})`);
    retryAfterMs = Number(probe.headers.get('retry-after')) * 1000;
    const refusedBefore = await bodyRefusals(port);
    sending = sendToolCalls(exporter, calls, { sdk, unrelated: false });
    if (!(await eventually(async () => (await bodyRefusals(port)) > refusedBefore, 10_000))) throw new Error('the export was not refused');
  } finally {
    await hold.release();
  }
  await sending;
  return { retryAfterMs, retryDelaysMs: sdkRetryDelaysMs.slice(delaysBefore) };
}

/**
 * What the gRPC exporter (@grpc/grpc-js, both lines) saw of a refused export: its status code, its
 * Retry-After, the google.rpc.Status of grpc-status-details-bin and that status's RetryInfo delay
 * (whole seconds).
 */
export function grpcRetryHint(result: Result): { code: number; retryAfter: number; status: Status | null; retryInfo: number | null } {
  const err = result.error as unknown as { code: number; metadata: { get(k: string): (string | Buffer)[] } };
  const bin = err.metadata.get('grpc-status-details-bin')[0];
  const status = bin instanceof Buffer ? fromBinary(StatusSchema, bin) : null;
  let retryInfo: number | null = null;
  for (const any of status?.details ?? []) {
    const info = anyUnpack(any, RetryInfoSchema);
    if (info) retryInfo = Number(info.retryDelay?.seconds ?? -1n);
  }
  return { code: err.code, retryAfter: Number(err.metadata.get('retry-after')[0]), status, retryInfo };
}
