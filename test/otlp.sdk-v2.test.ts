// The OpenTelemetry JS 2.x line (@opentelemetry/sdk-trace 2.12, exporters 0.223), kept for the
// agents that still run it: the OTLP receivers' other tests use the current 3.x line, this file
// the 2.x one, installed as npm aliases (@opentelemetry/<name>-v2 in package.json, each exporter
// with its own 2.x dependencies nested under it). Spans and the duration metric through the 2.x
// protobuf, JSON and gRPC exporters land, and a throttled export shows the exporter the retry
// hint: the HTTP exporter waits the 429's Retry-After and lands, the gRPC exporter gets
// RESOURCE_EXHAUSTED with a google.rpc.RetryInfo equal to Retry-After.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Code } from '@connectrpc/connect';
import { OTLPMetricExporter as GrpcMetricExporter } from '@opentelemetry/exporter-metrics-otlp-grpc-v2';
import { AggregationTemporalityPreference, OTLPMetricExporter as JsonMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http-v2';
import { OTLPMetricExporter as ProtoMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto-v2';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc-v2';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http-v2';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto-v2';
import { resourceFromAttributes } from '@opentelemetry/resources-v2';
import { MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics-v2';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace-v2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { exportThrottled, grpcRetryHint, holdBodyShare, mcpMeter, recordingMetricExporter, recordingSpanExporter, sendToolCalls, type OtelSdk } from './support/otel.js';

const SDK_2: OtelSdk = { line: '2.x', resourceFromAttributes, TracerProvider, BatchSpanProcessor, MeterProvider, PeriodicExportingMetricReader };

const MiB = 1024 * 1024;
let t: TestApp;

beforeAll(async () => {
  // The smallest body budget (a client network's share is one 4 MiB export) for the throttled export.
  t = await startTestApp({ OTLP_JOIN_WINDOW_MS: '300', HTTP_BODY_BUDGET_BYTES: String(32 * MiB) });
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

const interactions = async (url: string) => (await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`))).metrics.total_interactions as number;

/** The version of `dependency` as `pkg` (an installed package, by its name in node_modules) loads it. */
function versionAsLoadedBy(pkg: string, dependency: string): string {
  const from = createRequire(import.meta.url).resolve(pkg);
  let dir = dirname(createRequire(from).resolve(dependency));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (manifest.name === dependency) return manifest.version;
    } catch {
      // not a package root yet
    }
    if (dirname(dir) === dir) throw new Error(`${dependency} not found from ${pkg}`);
    dir = dirname(dir);
  }
}

describe(`OTLP receivers with the OpenTelemetry JS 2.x SDK (${backend})`, () => {
  it('the aliases are the 2.x line, each exporter with its own 2.x dependencies', () => {
    expect(versionAsLoadedBy('@opentelemetry/sdk-trace-v2', '@opentelemetry/core')).toMatch(/^2\./);
    for (const exporter of ['exporter-trace-otlp-proto-v2', 'exporter-trace-otlp-http-v2', 'exporter-trace-otlp-grpc-v2', 'exporter-metrics-otlp-proto-v2', 'exporter-metrics-otlp-grpc-v2']) {
      expect(versionAsLoadedBy(`@opentelemetry/${exporter}`, '@opentelemetry/otlp-exporter-base'), exporter).toMatch(/^0\.223\./);
      expect(versionAsLoadedBy(`@opentelemetry/${exporter}`, '@opentelemetry/core'), exporter).toMatch(/^2\./);
    }
    // The 3.x line the other tests use.
    expect(versionAsLoadedBy('@opentelemetry/exporter-trace-otlp-proto', '@opentelemetry/otlp-exporter-base')).toMatch(/^0\.30\d\./);
  });

  it('spans from the 2.x protobuf, JSON and gRPC exporters land as reports', async () => {
    const exporters = [
      ['proto', new ProtoTraceExporter({ url: `${t.base}/v1/traces` })],
      ['json', new JsonTraceExporter({ url: `${t.base}/v1/traces` })],
      ['grpc', new GrpcTraceExporter({ url: t.base })],
    ] as const;
    for (const [kind, exporter] of exporters) {
      const SERVER = `https://otlp-v2-${kind}.example.com/mcp`;
      const rec = recordingSpanExporter(exporter);
      await sendToolCalls(
        rec.exporter,
        [
          { url: SERVER, tool: 'v2_tool', latencyMs: 40 },
          { url: SERVER, tool: 'v2_tool', latencyMs: 80, outcome: 'tool_error' },
        ],
        { sdk: SDK_2 },
      );
      expect(rec.ok(), kind).toBe(true);
      expect(await interactions(SERVER), kind).toBe(2);
    }
  }, 60_000);

  it('mcp.client.operation.duration from the 2.x protobuf, JSON and gRPC exporters lands', async () => {
    const exporters = [
      ['proto', new ProtoMetricExporter({ url: `${t.base}/v1/metrics` })],
      ['json', new JsonMetricExporter({ url: `${t.base}/v1/metrics`, temporalityPreference: AggregationTemporalityPreference.DELTA })],
      ['grpc', new GrpcMetricExporter({ url: t.base })],
    ] as const;
    for (const [kind, exporter] of exporters) {
      const HOST = `metrics-v2-${kind}.example.com`;
      const rec = recordingMetricExporter(exporter);
      const meter = mcpMeter(rec.exporter, { 'service.instance.id': `metrics-v2-${kind}` }, SDK_2);
      meter.record(0.12, { 'gen_ai.tool.name': 'v2_tool', 'server.address': HOST });
      meter.record(0.7, { 'gen_ai.tool.name': 'v2_tool', 'server.address': HOST, 'error.type': 'tool_error' });
      await meter.flush();
      await meter.shutdown();
      expect(rec.ok(), kind).toBe(true);
      expect(await interactions(`https://${HOST}`), kind).toBe(2);
    }
  }, 60_000);

  it('a throttled export: the 2.x exporters see the retry hint (HTTP: waits Retry-After and lands; gRPC: RESOURCE_EXHAUSTED with RetryInfo)', async () => {
    const hold = await holdBodyShare(t.base);
    let grpc: ReturnType<typeof recordingSpanExporter>;
    try {
      grpc = recordingSpanExporter(new GrpcTraceExporter({ url: t.base }));
      // The SDK's flush rejects with the failed export's error; the recorded result is what is checked.
      await sendToolCalls(grpc.exporter, [{ url: 'https://otlp-v2-throttled-grpc.example.com/mcp', tool: 'v2_tool', latencyMs: 12 }], { sdk: SDK_2 }).catch(() => {});
    } finally {
      await hold.release();
    }
    expect(grpc.results).toHaveLength(1);
    const hint = grpcRetryHint(grpc.results[0]!);
    expect(hint.code).toBe(Code.ResourceExhausted);
    expect(hint.retryAfter).toBeGreaterThan(0);
    expect(hint.retryInfo).toBe(hint.retryAfter);

    const SERVER = 'https://otlp-v2-throttled-proto.example.com/mcp';
    const rec = recordingSpanExporter(new ProtoTraceExporter({ url: `${t.base}/v1/traces` }));
    const { retryAfterMs, retryDelaysMs } = await exportThrottled(t.base, rec.exporter, [{ url: SERVER, tool: 'v2_tool', latencyMs: 25 }], SDK_2);
    expect(retryAfterMs).toBeGreaterThan(0);
    expect(retryDelaysMs[0]).toBe(retryAfterMs);
    expect(rec.results).toHaveLength(1);
    expect(rec.ok()).toBe(true);
    expect(await interactions(SERVER)).toBe(1);
  }, 60_000);
});
