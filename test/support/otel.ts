// Real OpenTelemetry JS SDK senders for the OTLP receiver tests: a TracerProvider with a stock
// OTLP exporter that emits MCP client spans as the MCP semantic conventions describe them, and a
// MeterProvider that records mcp.client.operation.duration.
import { DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, diag, trace, type Attributes } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader, type PushMetricExporter, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { BatchSpanProcessor, TracerProvider, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace';

/** Warnings the SDK logs (the exporters log an OTLP partial success there). */
export const sdkWarnings: string[] = [];
diag.setLogger(
  {
    error: (m: string, ...a: unknown[]) => void sdkWarnings.push(`error: ${m} ${a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' ')}`),
    warn: (m: string, ...a: unknown[]) => void sdkWarnings.push(`warn: ${m} ${a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' ')}`),
    info: () => {},
    debug: () => {},
    verbose: () => {},
  },
  DiagLogLevel.WARN,
);

/** Wraps an exporter so a test sees every export's result (an SDK pipeline otherwise swallows failures). */
export function recordingSpanExporter(inner: SpanExporter) {
  const results: ExportResult[] = [];
  const exporter: SpanExporter = {
    export: (spans: ReadableSpan[], done: (r: ExportResult) => void) =>
      inner.export(spans, (r) => {
        results.push(r);
        done(r);
      }),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
  return { exporter, results, ok: () => results.length > 0 && results.every((r) => r.code === ExportResultCode.SUCCESS) };
}

export function recordingMetricExporter(inner: PushMetricExporter) {
  const results: ExportResult[] = [];
  const exporter: PushMetricExporter = {
    export: (m: ResourceMetrics, done: (r: ExportResult) => void) =>
      inner.export(m, (r) => {
        results.push(r);
        done(r);
      }),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush(),
    selectAggregationTemporality: inner.selectAggregationTemporality?.bind(inner),
    selectAggregation: inner.selectAggregation?.bind(inner),
  };
  return { exporter, results, ok: () => results.length > 0 && results.every((r) => r.code === ExportResultCode.SUCCESS) };
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
export async function sendToolCalls(exporter: SpanExporter, calls: readonly ToolCall[], opts: { resource?: Attributes; unrelated?: boolean } = {}): Promise<void> {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'otlp-test-agent', ...opts.resource }),
    spanProcessors: [new BatchSpanProcessor({ exporter, maxExportBatchSize: 2048, maxQueueSize: 4096, scheduledDelayMillis: 60_000 })],
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

/** A MeterProvider recording mcp.client.operation.duration (seconds, the conventions' buckets). */
export function mcpMeter(exporter: PushMetricExporter, resource: Attributes) {
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ resource: resourceFromAttributes({ 'service.name': 'otlp-test-agent', ...resource }), readers: [reader] });
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
