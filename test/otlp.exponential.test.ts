import { OTLPMetricExporter as GrpcMetricExporter } from '@opentelemetry/exporter-metrics-otlp-grpc';
import { AggregationTemporalityPreference, OTLPMetricExporter as JsonMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { OTLPMetricExporter as ProtoMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { AggregationType } from '@opentelemetry/sdk-metrics';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { mcpMeter, recordingMetricExporter, SDK_3, sdkWarnings } from './support/otel.js';

// mcp.client.operation.duration as an exponential histogram (OpenTelemetry's
// base2_exponential_bucket_histogram aggregation): the real OpenTelemetry JS 3.x SDK, configured
// for it with a View or with the exporter's aggregation preference (what
// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram does
// in the SDKs that read it; the JS SDK does not), sends through the stock protobuf, JSON and gRPC
// exporters. Each call becomes one report with a latency from its bucket (docs/telemetry.md).

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp();
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

async function rows(serverUrl: string) {
  return t.obs.db.query<{ success: boolean; latency_ms: number; tool_name: string | null }>(
    'SELECT t.success, t.latency_ms, t.tool_name FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1 ORDER BY t.latency_ms',
    [serverUrl],
  );
}

async function interactions(url: string): Promise<number | null> {
  const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`);
  if (res.status !== 200) {
    await res.arrayBuffer();
    return null;
  }
  return ((await res.json()) as { metrics: { total_interactions: number } }).metrics.total_interactions;
}

/** An SDK exponential histogram point (before encoding) as the exporter was handed it. */
interface SdkExpPoint {
  attributes: Record<string, unknown>;
  value: { scale: number; zeroCount: number; count: number; sum?: number; positive: { offset: number; bucketCounts: number[] }; negative: { offset: number; bucketCounts: number[] } };
}

/** The duration points of every export the recording exporter was handed, in order. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function durationPoints(exported: any[]): SdkExpPoint[][] {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return exported.map((rm: any) => rm.scopeMetrics.flatMap((sm: any) => sm.metrics.filter((m: any) => m.descriptor.name === 'mcp.client.operation.duration').flatMap((m: any) => m.dataPoints)));
}

/**
 * The documented latency of each call of a point (ms, to the microsecond): a positive bucket's
 * calls get base^(index + 1/2), the geometric middle of (base^index, base^(index+1)], with
 * base = 2^(2^-scale); zero-bucket calls half the zero threshold (the SDK's is 0).
 */
function bucketLatencies(p: SdkExpPoint): number[] {
  const out: number[] = [];
  for (let k = 0; k < p.value.zeroCount; k++) out.push(0);
  p.value.positive.bucketCounts.forEach((c, j) => {
    const index = p.value.positive.offset + j;
    const ms = Math.round(2 ** ((index + 0.5) / 2 ** p.value.scale) * 1000 * 1000) / 1000;
    for (let k = 0; k < c; k++) out.push(ms);
  });
  return out.sort((a, b) => a - b);
}

const RELATIVE_WIDTH = (scale: number) => 2 ** (2 ** -scale) - 1;

describe(`mcp.client.operation.duration as exponential histograms from the OpenTelemetry JS SDK (${backend})`, () => {
  it('protobuf, cumulative (a View): every call a report, deltas per stream across the SDK scaling down, a re-export adds nothing', async () => {
    const HOST = 'expo-proto.example.com';
    const SERVER = `https://${HOST}`;
    const at = { 'gen_ai.tool.name': 'e_tool', 'server.address': HOST, 'server.port': 443 };
    const proto = recordingMetricExporter(new ProtoMetricExporter({ url: `${t.base}/v1/metrics` }));
    const meter = mcpMeter(proto.exporter, { 'service.instance.id': 'expo-proto' }, SDK_3, { exponential: {} });
    meter.record(0.12, at);
    meter.record(0.12, at);
    meter.recordUnrelated();
    await meter.flush();
    const [first] = durationPoints(proto.exported);
    expect(first).toHaveLength(1);
    expect(first![0]!.value.scale).toBe(20); // the SDK's largest scale: one narrow bucket
    expect(first![0]!.value.count).toBe(2);
    // One bucket holds both calls and the point has a sum: the exact mean, 120 ms.
    expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms, r.tool_name])).toEqual([
      [true, 120, 'e_tool'],
      [true, 120, 'e_tool'],
    ]);

    await meter.flush(); // the same cumulative point again: nothing new
    expect(await rows(SERVER)).toHaveLength(2);

    // 0.7 s in the same stream: to hold 0.12 and 0.7 in 160 buckets the SDK scales the cumulative
    // point down; the previous point is scaled down to compare, and only the new call counts.
    meter.record(0.7, at);
    meter.record(3, { ...at, 'error.type': 'tool_error' }); // another stream, seen first now
    await meter.flush();
    const third = durationPoints(proto.exported)[2]!;
    const ok = third.find((p) => p.attributes['error.type'] === undefined)!;
    expect(ok.value.scale).toBeLessThan(20);
    expect(ok.value.count).toBe(3);
    expect((await rows(SERVER)).map((r) => [r.success, r.latency_ms])).toEqual([
      [true, 120],
      [true, 120],
      [true, 700],
      [false, 3000],
    ]);
    expect(await interactions(SERVER)).toBe(4);
    await meter.flush(); // and again: nothing new
    await meter.shutdown();
    expect(await rows(SERVER)).toHaveLength(4);
    expect(proto.ok()).toBe(true);
    // The unrelated counter is the only rejected point.
    expect(sdkWarnings.filter((w) => w.includes('Partial Success') && w.includes('could not be read'))).toEqual([]);
  }, 60_000);

  it('OTLP/JSON, delta (the exporter\'s aggregation preference): calls in different buckets get the geometric middle of their bucket, a zero its zero bucket', async () => {
    const HOST = 'expo-json.example.com';
    const SERVER = `https://${HOST}`;
    const json = recordingMetricExporter(
      new JsonMetricExporter({
        url: `${t.base}/v1/metrics`,
        temporalityPreference: AggregationTemporalityPreference.DELTA,
        aggregationPreference: () => ({ type: AggregationType.EXPONENTIAL_HISTOGRAM }),
      }),
    );
    const meter = mcpMeter(json.exporter, { 'service.instance.id': 'expo-json' });
    const values = [0.03, 0.3, 0.31, 0];
    for (const v of values) meter.record(v, { 'gen_ai.tool.name': 'j_tool', 'server.address': HOST });
    await meter.flush();
    await meter.flush(); // delta: an empty interval, nothing new
    await meter.shutdown();
    expect(json.ok()).toBe(true);

    const [points] = durationPoints(json.exported);
    expect(points).toHaveLength(1);
    const p = points![0]!;
    expect(p.value.zeroCount).toBe(1);
    expect(p.value.scale).toBeLessThan(20);
    const stored = (await rows(SERVER)).map((r) => r.latency_ms);
    expect(stored).toEqual(bucketLatencies(p));
    // ...each within its bucket's width of the value recorded.
    const width = RELATIVE_WIDTH(p.value.scale);
    expect(stored[0]).toBe(0);
    values
      .filter((v) => v > 0)
      .sort((a, b) => a - b)
      .forEach((v, k) => expect(Math.abs(stored[k + 1]! / (v * 1000) - 1), String(v)).toBeLessThanOrEqual(width));
    expect(await interactions(SERVER)).toBe(4);
  }, 60_000);

  it('gRPC, cumulative (the exporter\'s aggregation preference): counted once per call', async () => {
    const HOST = 'expo-grpc.example.com';
    const grpc = recordingMetricExporter(new GrpcMetricExporter({ url: t.base, aggregationPreference: () => ({ type: AggregationType.EXPONENTIAL_HISTOGRAM }) }));
    const meter = mcpMeter(grpc.exporter, { 'service.instance.id': 'expo-grpc' });
    meter.record(0.05, { 'gen_ai.tool.name': 'g_tool', 'server.address': HOST });
    await meter.flush();
    await meter.flush();
    meter.record(0.05, { 'gen_ai.tool.name': 'g_tool', 'server.address': HOST });
    meter.record(1.5, { 'gen_ai.tool.name': 'g_tool', 'server.address': HOST });
    await meter.flush();
    await meter.shutdown();
    expect(grpc.ok()).toBe(true);
    expect(durationPoints(grpc.exported).every((ps) => ps.every((p) => typeof p.value.scale === 'number'))).toBe(true);
    expect(await interactions(`https://${HOST}`)).toBe(3);
    const stored = (await rows(`https://${HOST}`)).map((r) => r.latency_ms);
    expect(stored).toHaveLength(3);
    // The first call alone: the exact mean. The second export's two new calls are in different
    // buckets: each the middle of its bucket, near its value.
    expect(stored.slice(0, 2)).toContain(50);
    const last = durationPoints(grpc.exported).at(-1)![0]!;
    const width = RELATIVE_WIDTH(last.value.scale);
    expect(Math.abs(stored[0]! / 50 - 1)).toBeLessThanOrEqual(width);
    expect(Math.abs(stored[1]! / 50 - 1)).toBeLessThanOrEqual(width);
    expect(Math.abs(stored[2]! / 1500 - 1)).toBeLessThanOrEqual(width);
  }, 60_000);
});
