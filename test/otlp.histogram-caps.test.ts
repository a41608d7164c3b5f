import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExportMetricsServiceRequestSchema, ExportMetricsServiceResponseSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { AggregationTemporality, type ExponentialHistogramDataPointSchema, type MetricSchema } from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { MAX_POINT_BUCKETS } from '../src/domain/otlp-metrics.js';
import { MAX_METRIC_REPORTS_PER_EXPORT } from '../src/services/otlp.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Hostile mcp.client.operation.duration points, hand-built and sent as binary protobuf to
// /v1/metrics: each is refused in the OTLP partial success with a reason of its own, costs
// bounded work and memory, and stores nothing (docs/telemetry.md "The metric").

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp();
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

const str = (key: string, v: string) => ({ key, value: { value: { case: 'stringValue' as const, value: v } } });
const NOW_NS = () => BigInt(Date.now()) * 1_000_000n;

async function rowCount(serverUrl: string): Promise<number> {
  return (await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1', [serverUrl]))[0]!.n;
}

/** One export of one metric; the answer's partial success (undefined when everything was read). */
async function exportMetric(metric: MessageInitShape<typeof MetricSchema>, service = 'caps-agent') {
  const body = toBinary(
    ExportMetricsServiceRequestSchema,
    create(ExportMetricsServiceRequestSchema, { resourceMetrics: [{ resource: { attributes: [str('service.name', service)] }, scopeMetrics: [{ metrics: [metric] }] }] }),
  );
  const res = await fetch(`${t.base}/v1/metrics`, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: Buffer.from(body) });
  expect(res.status).toBe(200);
  return fromBinary(ExportMetricsServiceResponseSchema, Buffer.from(await res.arrayBuffer())).partialSuccess;
}

const explicit = (host: string, counts: bigint[], bounds: number[]): MessageInitShape<typeof MetricSchema> => ({
  name: 'mcp.client.operation.duration',
  unit: 's',
  data: {
    case: 'histogram',
    value: {
      aggregationTemporality: AggregationTemporality.DELTA,
      dataPoints: [
        {
          attributes: [str('mcp.method.name', 'tools/call'), str('server.address', host)],
          startTimeUnixNano: NOW_NS() - 1_000_000_000n,
          timeUnixNano: NOW_NS(),
          count: counts.reduce((a, b) => a + b, 0n),
          bucketCounts: counts,
          explicitBounds: bounds,
        },
      ],
    },
  },
});

describe(`hostile mcp.client.operation.duration points (${backend})`, () => {
  it(`explicit buckets: a point of more than ${MAX_POINT_BUCKETS} buckets is refused, one of ${MAX_POINT_BUCKETS} read`, async () => {
    const bounds = (n: number) => Array.from({ length: n }, (_, k) => (k + 1) / 1000);
    const oneCall = (n: number) => Object.assign(new Array<bigint>(n).fill(0n), { [n - 2]: 1n });

    const HUGE = 'caps-explicit-huge.example.com';
    // 100,000 buckets: 1.6 MB of protobuf, one call in it.
    const huge = await exportMetric(explicit(HUGE, oneCall(100_000), bounds(99_999)));
    expect(huge?.rejectedDataPoints).toBe(1n);
    expect(huge?.errorMessage).toContain(`1 mcp.client.operation.duration point could not be read (more than ${MAX_POINT_BUCKETS} buckets)`);
    expect(await rowCount(`https://${HUGE}`)).toBe(0);

    const EDGE = 'caps-explicit-edge.example.com';
    expect(await exportMetric(explicit(EDGE, oneCall(MAX_POINT_BUCKETS), bounds(MAX_POINT_BUCKETS - 1)))).toBeUndefined();
    expect(await rowCount(`https://${EDGE}`)).toBe(1);
  });

  it('exponential buckets: too many buckets, a scale beyond 20, offsets past a double, calls below zero, counts that do not add up and millions of calls are refused, each said', async () => {
    const host = (n: string) => `caps-exp-${n}.example.com`;
    type Point = MessageInitShape<typeof ExponentialHistogramDataPointSchema>;
    type Buckets = { offset: number; bucketCounts: bigint[] };
    const point = (name: string, o: { scale?: number; count?: bigint; positive?: Buckets; negative?: Buckets; counts: bigint[] }): Point => {
      const { counts, ...rest } = o;
      return {
        attributes: [str('mcp.method.name', 'tools/call'), str('server.address', host(name))],
        startTimeUnixNano: NOW_NS() - 1_000_000_000n,
        timeUnixNano: NOW_NS(),
        scale: 20,
        positive: { offset: 0, bucketCounts: counts },
        count: counts.reduce((a, b) => a + b, 0n),
        ...rest,
      };
    };
    const ok = point('ok', { positive: { offset: -(2 ** 31), bucketCounts: [1n] }, counts: [1n] }); // 2^(-2048) s: read, 0 ms
    const points = [
      ok,
      point('huge', { counts: new Array<bigint>(100_000).fill(0n), count: 0n }),
      point('scale', { scale: 21, counts: [1n] }),
      point('range', { positive: { offset: 2 ** 31 - 10, bucketCounts: [1n] }, counts: [1n] }),
      point('negative', { negative: { offset: 3, bucketCounts: [2n] }, counts: [1n], count: 3n }),
      point('sum', { counts: [1n, 1n], count: 7n }),
      point('millions', { counts: [3_000_000n, 2_000_000n] }),
    ];
    const answer = await exportMetric({
      name: 'mcp.client.operation.duration',
      unit: 's',
      data: { case: 'exponentialHistogram', value: { aggregationTemporality: AggregationTemporality.DELTA, dataPoints: points } },
    });
    expect(answer?.rejectedDataPoints).toBe(6n);
    const m = answer!.errorMessage;
    expect(m).toContain('6 of 7 data points were not recorded');
    expect(m).toContain(`1 mcp.client.operation.duration point could not be read (more than ${MAX_POINT_BUCKETS} buckets)`);
    expect(m).toContain('1 mcp.client.operation.duration point could not be read (an exponential scale outside -10 to 20)');
    expect(m).toContain('1 mcp.client.operation.duration point could not be read (exponential buckets beyond the largest double');
    expect(m).toContain('1 mcp.client.operation.duration point could not be read (calls in negative exponential buckets: a duration is never negative)');
    expect(m).toContain('1 mcp.client.operation.duration point could not be read (inconsistent buckets');
    expect(m).toContain(`1 point would have added more than ${MAX_METRIC_REPORTS_PER_EXPORT} calls to one export`);
    for (const name of ['huge', 'scale', 'range', 'negative', 'sum', 'millions']) expect(await rowCount(`https://${host(name)}`), name).toBe(0);
    expect(
      await t.obs.db.query<{ latency_ms: number }>('SELECT t.latency_ms FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1', [`https://${host('ok')}`]),
    ).toEqual([{ latency_ms: 0 }]);
  });
});
