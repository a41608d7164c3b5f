import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ExportMetricsServiceRequestSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { AggregationTemporality, type ExponentialHistogramDataPointSchema } from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { bucketRange, createHistogramStreams, latenciesOf, MAX_POINT_BUCKETS, readMetrics, type BucketLayout, type ToolPoint } from '../src/domain/otlp-metrics.js';
import { REPORT_LIMITS } from '../src/domain/telemetry.js';

// The pure side of exponential histogram points of mcp.client.operation.duration
// (docs/telemetry.md "The metric"): which points are read, what each bucket stands for, and
// cumulative points as deltas per stream across the scale changes an SDK makes.

const s = (key: string, v: string) => ({ key, value: { value: { case: 'stringValue' as const, value: v } } });
const T0 = 1_760_000_000_000n * 1_000_000n;
const INT32_MAX = 2 ** 31 - 1;
const INT32_MIN = -(2 ** 31);

type ExpPoint = MessageInitShape<typeof ExponentialHistogramDataPointSchema>;
type Buckets = { offset: number; bucketCounts: bigint[] };
type ExpFields = { scale?: number; zeroCount?: bigint; zeroThreshold?: number; count?: bigint; sum?: number; timeUnixNano?: bigint; negative?: Buckets };

/** A tools/call point: positive buckets at `offset`, the count their sum plus the zero count unless given. */
const expPoint = (o: ExpFields & { counts?: bigint[]; offset?: number; method?: string }): ExpPoint => {
  const { counts = [], offset = 0, method = 'tools/call', ...rest } = o;
  return {
    attributes: [s('mcp.method.name', method), s('server.address', 'x.example.com')],
    startTimeUnixNano: T0,
    timeUnixNano: T0 + 1_000_000_000n,
    scale: 0,
    positive: { offset, bucketCounts: counts },
    count: counts.reduce((a, b) => a + b, o.zeroCount ?? 0n),
    ...rest,
  };
};

const exportOf = (points: ExpPoint[], unit = 's', temporality = AggregationTemporality.CUMULATIVE) =>
  create(ExportMetricsServiceRequestSchema, {
    resourceMetrics: [
      {
        resource: { attributes: [s('service.name', 'agent')] },
        scopeMetrics: [{ metrics: [{ name: 'mcp.client.operation.duration', unit, data: { case: 'exponentialHistogram', value: { aggregationTemporality: temporality, dataPoints: points } } }] }],
      },
    ],
  });

describe('readMetrics: exponential histogram points', () => {
  it('reads the zero bucket and the positive buckets with their scale, offset and unit; other methods are ignored, not invalid', () => {
    const r = readMetrics(
      exportOf([
        expPoint({ scale: 3, offset: -20, counts: [1n, 0n, 2n], zeroCount: 1n, zeroThreshold: 0.001, sum: 0.5 }),
        expPoint({ method: 'tools/list', counts: [1n] }),
      ]),
    );
    expect(r).toMatchObject({ total: 2, other: 1, invalid: 0 });
    expect(r.points[0]).toMatchObject({
      temporality: 'cumulative',
      layout: { kind: 'exponential', scale: 3, offset: -20, zeroThresholdMs: 1, msPerUnit: 1000 },
      counts: [1n, 1n, 0n, 2n],
      count: 4n,
      sumMs: 500,
      serverAddress: 'x.example.com',
    });
    const ms = readMetrics(exportOf([expPoint({ counts: [1n] })], 'ms', AggregationTemporality.DELTA));
    expect(ms.points[0]).toMatchObject({ temporality: 'delta', layout: { msPerUnit: 1 } });
    // Explicit and exponential points of the same attributes are the same series.
    const explicit = readMetrics(
      create(ExportMetricsServiceRequestSchema, {
        resourceMetrics: [
          {
            resource: { attributes: [s('service.name', 'agent')] },
            scopeMetrics: [
              {
                metrics: [
                  {
                    name: 'mcp.client.operation.duration',
                    unit: 's',
                    data: { case: 'histogram', value: { aggregationTemporality: AggregationTemporality.CUMULATIVE, dataPoints: [{ attributes: expPoint({}).attributes, timeUnixNano: T0, count: 0n }] } },
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
    expect(explicit.points[0]!.stream).toBe(r.points[0]!.stream);
  });

  it('refuses each hostile point with its reason, bounded before anything is added up', () => {
    const many = (n: number) => new Array<bigint>(n).fill(1n);
    const r = readMetrics(
      exportOf([
        expPoint({ counts: many(MAX_POINT_BUCKETS) }), // read
        expPoint({ counts: many(MAX_POINT_BUCKETS + 1) }),
        expPoint({ counts: many(50_000), negative: { offset: 0, bucketCounts: new Array<bigint>(50_000).fill(0n) } }),
        expPoint({ counts: many(100_000), count: 1n }), // too many first: never added up
        expPoint({ scale: 21, counts: [1n] }),
        expPoint({ scale: -11, counts: [1n] }),
        expPoint({ scale: 20, offset: INT32_MIN, counts: [1n] }), // read: 2^(-2048) s is 0
        expPoint({ scale: 20, offset: INT32_MAX - 5, counts: [1n] }), // 2^2048 s
        expPoint({ scale: -10, offset: 1, counts: [1n] }), // 2^2048 s as well
        expPoint({ zeroThreshold: Number.NaN, counts: [1n] }),
        expPoint({ zeroThreshold: -1, counts: [1n] }),
        expPoint({ zeroThreshold: Number.POSITIVE_INFINITY, counts: [1n] }),
        expPoint({ counts: [1n], negative: { offset: 0, bucketCounts: [0n, 1n] }, count: 2n }),
        expPoint({ counts: [1n], negative: { offset: 0, bucketCounts: [0n, 0n] } }), // read: no call below zero
        expPoint({ counts: [1n, 1n], count: 3n }),
        expPoint({ counts: [1n, 1n], zeroCount: 1n, count: 2n }),
        expPoint({ counts: [1n], timeUnixNano: 0n }),
        expPoint({ counts: [5_000_000n] }), // read: the cap on calls is per export (the service)
      ]),
    );
    expect(r.points.map((p) => p.counts.length)).toEqual([MAX_POINT_BUCKETS + 1, 2, 2, 2]);
    expect(r.invalidWhy).toEqual({ too_many_buckets: 3, scale: 2, range: 2, buckets: 5, negative: 1, time: 1 });
    expect(r.invalid).toBe(14);
  });
});

const exp = (scale: number, offset: number, zeroThresholdMs = 0, msPerUnit = 1000): BucketLayout => ({ kind: 'exponential', scale, offset, zeroThresholdMs, msPerUnit });

describe('what an exponential bucket stands for', () => {
  it('bucket index i is (base^i, base^(i+1)], base = 2^(2^-scale); its calls get the geometric middle base^(i + 1/2)', () => {
    const expectRange = (layout: BucketLayout, i: number, want: { lower: number; upper: number; middle: number }) => {
      const r = bucketRange(layout, i);
      expect(r.lower).toBeCloseTo(want.lower, 9);
      expect(r.upper).toBeCloseTo(want.upper, 9);
      expect(r.middle).toBeCloseTo(want.middle, 9);
    };
    // scale 0: base 2; counts[1] is index `offset`.
    expectRange(exp(0, 0), 1, { lower: 1000, upper: 2000, middle: 1000 * Math.SQRT2 });
    expectRange(exp(0, -4), 2, { lower: 125, upper: 250, middle: 125 * Math.SQRT2 });
    // scale 1: base sqrt(2); scale -1: base 4; scale 20: a factor of 1.0000007.
    expectRange(exp(1, 2), 1, { lower: 2000, upper: 2000 * Math.SQRT2, middle: 2000 * 2 ** 0.25 });
    expectRange(exp(-1, 1), 1, { lower: 4000, upper: 16_000, middle: 8000 });
    expectRange(exp(20, -3_206_000), 1, { lower: 1000 * 2 ** (-3_206_000 / 2 ** 20), upper: 1000 * 2 ** (-3_205_999 / 2 ** 20), middle: 1000 * 2 ** (-3_205_999.5 / 2 ** 20) });
    // The zero bucket [0, threshold]: half its threshold.
    expectRange(exp(0, 0, 0), 0, { lower: 0, upper: 0, middle: 0 });
    expectRange(exp(0, 0, 2), 0, { lower: 0, upper: 2, middle: 1 });
    // ms as the unit.
    expectRange(exp(0, 3, 0, 1), 1, { lower: 8, upper: 16, middle: 8 * Math.SQRT2 });
  });

  it('turns a delta into latencies: middles, the exact mean when one bucket holds every call, clamped to a report', () => {
    expect(latenciesOf({ counts: [1, 2, 0, 3], count: 6, sumMs: 1 }, exp(0, 0, 0))).toEqual([
      { latencyMs: 0, count: 1 },
      { latencyMs: 1414.214, count: 2 },
      { latencyMs: 5656.854, count: 3 },
    ]);
    expect(latenciesOf({ counts: [0, 0, 4], count: 4, sumMs: 10_000 }, exp(0, 0))).toEqual([{ latencyMs: 2500, count: 4 }]);
    // A sum that does not fit the bucket is not trusted.
    expect(latenciesOf({ counts: [0, 0, 4], count: 4, sumMs: 40_000 }, exp(0, 0))).toEqual([{ latencyMs: 2828.427, count: 4 }]);
    expect(latenciesOf({ counts: [2], count: 2, sumMs: 0.5 }, exp(0, 0, 1))).toEqual([{ latencyMs: 0.25, count: 2 }]);
    // Beyond an hour: clamped, as an explicit overflow bucket is; below a microsecond: 0.
    expect(latenciesOf({ counts: [0, 1], count: 1, sumMs: undefined }, exp(20, INT32_MAX - 1))).toEqual([{ latencyMs: REPORT_LIMITS.latencyMaxMs, count: 1 }]);
    expect(latenciesOf({ counts: [0, 1], count: 1, sumMs: undefined }, exp(20, INT32_MIN))).toEqual([{ latencyMs: 0, count: 1 }]);
  });
});

const point = (o: Partial<ToolPoint> & { counts: bigint[] }): ToolPoint => ({
  resource: 'r',
  stream: 's',
  temporality: 'cumulative',
  startNs: 100n,
  timeNs: 200n,
  layout: exp(3, 0),
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

describe('cumulative exponential streams', () => {
  it('adds what each point adds, with the offset moving and the SDK scaling down', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 50n });
    // scale 3, indexes 0..2 and the zero bucket.
    expect(st.delta(point({ counts: [1n, 1n, 0n, 2n] }), 1n)).toEqual({ counts: [1, 1, 0, 2], count: 4, sumMs: undefined });
    expect(st.delta(point({ counts: [1n, 1n, 0n, 2n] }), 1n)).toBeNull(); // a re-export
    // A smaller value arrived: the offset moves to -2, the same buckets shift right by two.
    expect(st.delta(point({ timeNs: 300n, layout: exp(3, -2), counts: [1n, 1n, 0n, 1n, 0n, 2n] }), 1n)).toEqual({ counts: [0, 1, 0, 0, 0, 0], count: 1, sumMs: undefined });
    // Scaled down by 2 (scale 1): indexes -2..2 of scale 3 become -1 (for -2..-1) and 0 (for 0..3).
    expect(st.delta(point({ timeNs: 400n, layout: exp(1, -1), counts: [1n, 1n, 4n] }), 1n)).toEqual({ counts: [0, 0, 1], count: 1, sumMs: undefined });
    // Scaling up cannot be compared: only a new baseline...
    expect(st.delta(point({ timeNs: 500n, layout: exp(2, -2), counts: [1n, 0n, 2n, 3n] }), 1n)).toBeNull();
    // ...from which the next point counts again.
    expect(st.delta(point({ timeNs: 600n, layout: exp(2, -2), counts: [1n, 0n, 2n, 4n] }), 1n)).toEqual({ counts: [0, 0, 0, 1], count: 1, sumMs: undefined });
  });

  it('resets as explicit streams do: a new start counts in full, a count going down only sets a baseline', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 50n });
    st.delta(point({ counts: [0n, 3n] }), 1n);
    expect(st.delta(point({ timeNs: 300n, counts: [0n, 2n] }), 1n)).toBeNull(); // went down, same start
    expect(st.delta(point({ timeNs: 400n, counts: [0n, 3n] }), 1n)).toEqual({ counts: [0, 1], count: 1, sumMs: undefined });
    // Calls that no bucket of the new point can hold (the same count, moved): a reset, same start.
    expect(st.delta(point({ timeNs: 500n, layout: exp(3, 5), counts: [0n, 3n] }), 1n)).toBeNull();
    // The sender restarted: counted in full.
    expect(st.delta(point({ startNs: 900n, timeNs: 1000n, counts: [1n, 1n] }), 1n)).toEqual({ counts: [1, 1], count: 2, sumMs: undefined });
    // Another zero threshold, or an explicit point in the same stream: only a baseline.
    expect(st.delta(point({ startNs: 900n, timeNs: 1100n, layout: exp(3, 0, 5), counts: [1n, 2n] }), 1n)).toBeNull();
    expect(st.delta(point({ startNs: 900n, timeNs: 1200n, layout: { kind: 'explicit', boundsMs: [10] }, counts: [1n, 3n] }), 1n)).toBeNull();
    expect(st.delta(point({ startNs: 900n, timeNs: 1300n, layout: { kind: 'explicit', boundsMs: [10] }, counts: [1n, 4n] }), 1n)).toEqual({ counts: [0, 1], count: 1, sumMs: undefined });
  });

  it('compares points with offsets at the ends of int32 and 30 scales apart in time proportional to their buckets', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 0n });
    st.delta(point({ layout: exp(20, INT32_MAX - 320), counts: [0n, ...new Array<bigint>(319).fill(1n)] }), 1n);
    // The same calls now at the other end of int32: 2^32 indexes apart, which are never walked.
    expect(st.delta(point({ timeNs: 300n, layout: exp(20, INT32_MIN), counts: [0n, 319n] }), 1n)).toBeNull();
    // Scaled down from 20 to -10 (2^30 indexes merge into one): all of them land in index 1.
    st.delta(point({ stream: 'down', layout: exp(20, INT32_MAX - 320), counts: [0n, ...new Array<bigint>(319).fill(1n)] }), 1n);
    expect(st.delta(point({ stream: 'down', timeNs: 300n, layout: exp(-10, 1), counts: [0n, 320n] }), 1n)).toEqual({ counts: [0, 1], count: 1, sumMs: undefined });
  });

  it('counts a delta point once', () => {
    const st = createHistogramStreams({ maxStreams: 10, watermarkNs: 0n });
    const p = point({ temporality: 'delta', counts: [1n, 2n] });
    expect(st.delta(p, 1n)).toEqual({ counts: [1, 2], count: 3, sumMs: undefined });
    expect(st.delta(p, 2n)).toBeNull();
  });
});
