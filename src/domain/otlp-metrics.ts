// OTLP metrics -> MCP tool calls (docs/telemetry.md "The metric"). The MCP conventions define the
// histogram `mcp.client.operation.duration` (unit s, attributes as on the client span, no per-call
// values): a point adds counts per latency bucket, explicit buckets or OpenTelemetry's base-2
// exponential ones. Cumulative points become deltas per stream, so a re-export never counts
// twice; each call of a delta becomes one report whose latency stands for its bucket. Pure: time
// is an argument; the stream memory is bounded.

import type { ExportMetricsServiceRequest } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import type { KeyValue } from '../../gen/opentelemetry/proto/common/v1/common_pb.js';
import { AggregationTemporality, type ExponentialHistogramDataPoint, type HistogramDataPoint, type Metric } from '../../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { attributeMap, fingerprint, resourceFingerprint } from './otlp-attributes.js';
import { ERROR_TYPE, httpStatusOf, HTTP_STATUS, LEGACY_HTTP_URL, MCP_METHOD, MCP_TOOLS_CALL, SERVER_ADDRESS, SERVER_PORT, TOOL_NAME, URL_FULL } from './otlp-spans.js';
import { REPORT_LIMITS } from './telemetry.js';

export const MCP_CLIENT_DURATION = 'mcp.client.operation.duration';

/**
 * Most buckets one histogram point may have (docs/telemetry.md): explicit bucket counts, or an
 * exponential point's positive and negative bucket counts together. Twice the 160 of the
 * OpenTelemetry SDKs' default exponential histogram, twenty times the conventions' 15 explicit
 * buckets. A point's buckets are read, and its stream remembers them, so without a bound one 4 MiB
 * export of one point held 12 MB of memory for as long as its stream was remembered (up to
 * OTLP_METRIC_STREAMS of them).
 */
export const MAX_POINT_BUCKETS = 320;

/**
 * The scales an exponential histogram point may have: OpenTelemetry's (the SDKs' MaxScale 20, the
 * data model's smallest, -10). A bucket of scale s spans a factor of 2^(2^-s).
 */
export const EXPONENTIAL_SCALES = { min: -10, max: 20 } as const;

/** Why an `mcp.client.operation.duration` tools/call point could not be read. */
export type InvalidReason = 'kind' | 'unit' | 'temporality' | 'time' | 'buckets' | 'too_many_buckets' | 'scale' | 'range' | 'negative';

const POINT_ATTRIBUTES = [MCP_METHOD, TOOL_NAME, ERROR_TYPE, SERVER_ADDRESS, SERVER_PORT, URL_FULL, LEGACY_HTTP_URL, HTTP_STATUS] as const;

/**
 * Which duration each of a point's `counts` stands for.
 * - explicit: `counts[i]` for (boundsMs[i-1], boundsMs[i]], the first bucket from 0, the last one
 *   unbounded above;
 * - exponential: `counts[0]` is the zero bucket [0, zeroThresholdMs]; `counts[1 + j]` the bucket
 *   (base^(offset+j), base^(offset+j+1)] in the metric's unit (`msPerUnit` ms), base = 2^(2^-scale).
 */
export type BucketLayout =
  | { kind: 'explicit'; boundsMs: number[] }
  | { kind: 'exponential'; scale: number; offset: number; zeroThresholdMs: number; msPerUnit: number };

/** One histogram point of `mcp.client.operation.duration` for `tools/call`. */
export interface ToolPoint {
  /** Fingerprint of the resource (spans from the same resource take precedence). */
  resource: string;
  /** Fingerprint of resource + scope + metric + point attributes: one cumulative series. */
  stream: string;
  temporality: 'cumulative' | 'delta';
  startNs: bigint;
  timeNs: bigint;
  layout: BucketLayout;
  counts: bigint[];
  count: bigint;
  /** Sum of the durations in milliseconds, when the sender gave it. */
  sumMs: number | undefined;
  success: boolean;
  toolName: string | null;
  url: string | null;
  httpStatus: number | null;
  serverAddress: string | null;
  serverPort: number | null;
}

export interface MetricsReading {
  points: ToolPoint[];
  /** Data points of other metrics, other methods, or kinds that are not histograms. */
  other: number;
  /** `mcp.client.operation.duration` tools/call points that cannot be read (`invalidWhy` says why). */
  invalid: number;
  invalidWhy: Partial<Record<InvalidReason, number>>;
  total: number;
}

function refuse(out: MetricsReading, why: InvalidReason, n = 1): void {
  if (n <= 0) return;
  out.invalid += n;
  out.invalidWhy[why] = (out.invalidWhy[why] ?? 0) + n;
}

function pointCount(m: Metric): number {
  const d = m.data;
  return d.case === undefined ? 0 : d.value.dataPoints.length;
}

/** Milliseconds per unit of the metric; null for a unit that is not a duration we know. */
function msPerUnit(unit: string): number | null {
  if (unit === 's' || unit === '') return 1000; // the conventions' unit; an empty unit is taken as theirs
  if (unit === 'ms') return 1;
  return null;
}

const text = (v: string | number | boolean | undefined): string | null => (typeof v === 'string' && v !== '' ? v : null);

type Buckets = { layout: BucketLayout; counts: bigint[] };

/** An explicit-bucket point's buckets, or what is wrong with them. Work and memory bounded by MAX_POINT_BUCKETS. */
function explicitBuckets(p: HistogramDataPoint, unitMs: number): Buckets | InvalidReason {
  const b = p.explicitBounds;
  if (p.bucketCounts.length > MAX_POINT_BUCKETS || b.length > MAX_POINT_BUCKETS) return 'too_many_buckets';
  if (p.bucketCounts.length === 0 ? b.length !== 0 : p.bucketCounts.length !== b.length + 1) return 'buckets';
  for (let i = 0; i < b.length; i++) if (!Number.isFinite(b[i]!) || (i > 0 && b[i]! <= b[i - 1]!)) return 'buckets';
  let n = 0n;
  for (const c of p.bucketCounts) n += c;
  if (p.bucketCounts.length > 0 && n !== p.count) return 'buckets';
  return { layout: { kind: 'explicit', boundsMs: b.map((x) => x * unitMs) }, counts: p.bucketCounts };
}

/**
 * An exponential point's buckets, or what is wrong with them: more than MAX_POINT_BUCKETS (before
 * anything is added up), a scale outside EXPONENTIAL_SCALES, a zero threshold that is not a finite
 * number >= 0, a call in a negative bucket (a duration is never negative), buckets whose bounds
 * pass the largest double (2^1024, as explicit bounds must be finite), or counts that do not add
 * up to `count`. Offsets are int32: index arithmetic stays exact in doubles.
 */
function exponentialBuckets(p: ExponentialHistogramDataPoint, unitMs: number): Buckets | InvalidReason {
  const positive = p.positive?.bucketCounts ?? [];
  const negative = p.negative?.bucketCounts ?? [];
  const offset = p.positive?.offset ?? 0;
  if (positive.length + negative.length > MAX_POINT_BUCKETS) return 'too_many_buckets';
  if (!Number.isInteger(p.scale) || p.scale < EXPONENTIAL_SCALES.min || p.scale > EXPONENTIAL_SCALES.max) return 'scale';
  if (!Number.isFinite(p.zeroThreshold) || p.zeroThreshold < 0) return 'buckets';
  for (const c of negative) if (c > 0n) return 'negative';
  // The upper bound of the highest bucket, base^(offset + length), is 2^((offset + length) / 2^scale).
  if (positive.length > 0 && (offset + positive.length) / 2 ** p.scale >= 1024) return 'range';
  let n = p.zeroCount;
  for (const c of positive) n += c;
  if (n !== p.count) return 'buckets';
  return { layout: { kind: 'exponential', scale: p.scale, offset, zeroThresholdMs: p.zeroThreshold * unitMs, msPerUnit: unitMs }, counts: [p.zeroCount, ...positive] };
}

/**
 * Reads one export, or one piece of it (src/domain/otlp-export.ts) into the reading of the
 * pieces before it: a reading of the pieces in order is the reading of the whole export.
 */
export function readMetrics(req: ExportMetricsServiceRequest, out: MetricsReading = { points: [], other: 0, invalid: 0, invalidWhy: {}, total: 0 }): MetricsReading {
  for (const rm of req.resourceMetrics) {
    const resourceAttrs = rm.resource?.attributes ?? [];
    let resource: string | null = null;
    for (const sm of rm.scopeMetrics) {
      for (const m of sm.metrics) {
        const n = pointCount(m);
        out.total += n;
        if (m.name !== MCP_CLIENT_DURATION) {
          out.other += n;
          continue;
        }
        const d = m.data;
        if (d.case !== 'histogram' && d.case !== 'exponentialHistogram') {
          // The name on a sum, gauge or summary: not read (docs/telemetry.md).
          refuse(out, 'kind', n);
          continue;
        }
        const unitMs = msPerUnit(m.unit);
        const t = d.value.aggregationTemporality;
        const temporality = t === AggregationTemporality.CUMULATIVE ? 'cumulative' : t === AggregationTemporality.DELTA ? 'delta' : null;
        /** One point of either kind: its buckets are read by `buckets` once the rest is known good. */
        const take = (p: { attributes: KeyValue[]; startTimeUnixNano: bigint; timeUnixNano: bigint; count: bigint; sum?: number }, buckets: (unitMs: number) => Buckets | InvalidReason) => {
          const a = attributeMap(p.attributes, POINT_ATTRIBUTES);
          if (text(a.get(MCP_METHOD)) !== MCP_TOOLS_CALL) {
            out.other++;
            return;
          }
          if (unitMs === null || temporality === null) return refuse(out, unitMs === null ? 'unit' : 'temporality');
          if (p.timeUnixNano <= 0n) return refuse(out, 'time');
          const b = buckets(unitMs);
          if (typeof b === 'string') return refuse(out, b);
          resource ??= resourceFingerprint(resourceAttrs);
          const port = a.get(SERVER_PORT);
          out.points.push({
            resource,
            stream: fingerprint(resourceAttrs, sm.scope?.name ?? '', sm.scope?.version ?? '', m.name, m.unit, p.attributes),
            temporality,
            startNs: p.startTimeUnixNano,
            timeNs: p.timeUnixNano,
            layout: b.layout,
            counts: b.counts,
            count: p.count,
            sumMs: p.sum === undefined ? undefined : p.sum * unitMs,
            success: text(a.get(ERROR_TYPE)) === null,
            toolName: text(a.get(TOOL_NAME)),
            url: text(a.get(URL_FULL)) ?? text(a.get(LEGACY_HTTP_URL)),
            httpStatus: httpStatusOf(a.get(HTTP_STATUS)),
            serverAddress: text(a.get(SERVER_ADDRESS)),
            serverPort: typeof port === 'number' && Number.isInteger(port) && port > 0 && port <= 65535 ? port : null,
          });
        };
        if (d.case === 'histogram') for (const p of d.value.dataPoints) take(p, (u) => explicitBuckets(p, u));
        else for (const p of d.value.dataPoints) take(p, (u) => exponentialBuckets(p, u));
      }
    }
  }
  return out;
}

/** The calls a point adds since the last one of its stream. */
export interface PointDelta {
  counts: number[];
  count: number;
  sumMs: number | undefined;
}

/** A layout as a stream remembers it: explicit bounds copied into a typed array, not the decoded export's. */
type StoredLayout = { kind: 'explicit'; bounds: Float64Array } | Extract<BucketLayout, { kind: 'exponential' }>;

/** What a stream remembers of its last point: counts in a typed array (8 bytes a bucket). */
interface StreamState {
  startNs: bigint;
  timeNs: bigint;
  counts: BigUint64Array;
  count: bigint;
  sumMs: number | undefined;
  layout: StoredLayout;
}

function stored(p: ToolPoint): StreamState {
  const layout: StoredLayout = p.layout.kind === 'explicit' ? { kind: 'explicit', bounds: Float64Array.from(p.layout.boundsMs) } : { ...p.layout };
  return { startNs: p.startNs, timeNs: p.timeNs, counts: BigUint64Array.from(p.counts), count: p.count, sumMs: p.sumMs, layout };
}

function sameBounds(a: Float64Array, b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The previous point's counts in `p`'s buckets; 'reset' when it had calls where `p` has none to
 * hold them; null when the two cannot be compared. Explicit: the same bounds. Exponential: the same
 * zero threshold and a scale no larger than before. An SDK scales a cumulative stream down as its
 * values spread (each bucket of scale s - k merges 2^k buckets of scale s: index >> k), so the
 * previous point is scaled down to `p`'s scale. O(buckets of both): offsets far apart cost nothing.
 */
function previousIn(prev: StreamState, p: ToolPoint): bigint[] | 'reset' | null {
  const a = prev.layout;
  const b = p.layout;
  if (a.kind === 'explicit' || b.kind === 'explicit') {
    return a.kind === 'explicit' && b.kind === 'explicit' && sameBounds(a.bounds, b.boundsMs) ? Array.from(prev.counts) : null;
  }
  if (a.zeroThresholdMs !== b.zeroThresholdMs || a.msPerUnit !== b.msPerUnit || b.scale > a.scale) return null;
  const out = new Array<bigint>(p.counts.length).fill(0n);
  out[0] = prev.counts[0] ?? 0n;
  const merged = 2 ** (a.scale - b.scale);
  for (let j = 1; j < prev.counts.length; j++) {
    const c = prev.counts[j]!;
    if (c === 0n) continue;
    const k = Math.floor((a.offset + j - 1) / merged) - b.offset + 1;
    if (k < 1 || k >= out.length) return 'reset';
    out[k] = out[k]! + c;
  }
  return out;
}

export interface HistogramStreamsOptions {
  /** Most streams remembered (least recently seen forgotten first). */
  maxStreams: number;
  /**
   * Cumulative streams that started before this time (ns since the epoch; the receiver's start)
   * and that are seen for the first time only set a baseline: their earlier calls may have been
   * counted before (by this process before a restart, or before the stream was forgotten).
   */
  watermarkNs: bigint;
}

/**
 * Cumulative -> delta per stream, and de-duplication of delta points. Memory is bounded by
 * `maxStreams`; forgetting a stream raises the watermark, so it is never counted twice.
 */
export function createHistogramStreams(opts: HistogramStreamsOptions) {
  const streams = new Map<string, StreamState>();
  const deltas = new Set<string>();
  let watermark = opts.watermarkNs;

  function touch(key: string, value: StreamState, nowNs: bigint): void {
    streams.delete(key);
    streams.set(key, value);
    while (streams.size > opts.maxStreams) {
      streams.delete(streams.keys().next().value!);
      // A forgotten stream seen again must not count its whole history again.
      if (nowNs > watermark) watermark = nowNs;
    }
  }

  const full = (p: ToolPoint): PointDelta => ({ counts: p.counts.map(Number), count: Number(p.count), sumMs: p.sumMs });

  /**
   * One export's points: deltas are computed against what is remembered plus what this batch
   * already saw, and remembered only on `commit` (after the reports are stored), so an export
   * that failed and is retried counts its calls then, once.
   */
  function begin() {
    const staged = new Map<string, StreamState>();
    const stagedDeltas = new Set<string>();
    return {
      /** The calls this point adds, or null when it adds none (a baseline, a re-export, an older point). */
      delta(p: ToolPoint): PointDelta | null {
        if (p.temporality === 'delta') {
          const key = `${p.stream}:${p.startNs}:${p.timeNs}`;
          if (deltas.has(key) || stagedDeltas.has(key)) return null;
          stagedDeltas.add(key);
          return p.count > 0n ? full(p) : null;
        }
        const prev = staged.get(p.stream) ?? streams.get(p.stream);
        if (!prev) {
          staged.set(p.stream, stored(p));
          return p.startNs >= watermark && p.startNs > 0n && p.count > 0n ? full(p) : null;
        }
        if (p.startNs === prev.startNs && p.timeNs <= prev.timeNs) return null; // a re-export or an older point
        staged.set(p.stream, stored(p));
        const before = p.startNs === prev.startNs ? previousIn(prev, p) : null;
        const reset = p.startNs !== prev.startNs || p.count < prev.count || before === 'reset' || (before !== null && p.counts.some((c, i) => c < before[i]!));
        if (reset || before === null || typeof before === 'string') {
          // A new start: the stream restarted after the one we followed, so none of it was counted.
          // Same start with buckets that cannot be compared: nothing can be told apart; only a new baseline.
          return reset && p.startNs > prev.startNs && p.count > 0n ? full(p) : null;
        }
        const count = Number(p.count - prev.count);
        if (count === 0) return null;
        return {
          counts: p.counts.map((c, i) => Number(c - before[i]!)),
          count,
          sumMs: p.sumMs !== undefined && prev.sumMs !== undefined ? p.sumMs - prev.sumMs : undefined,
        };
      },
      /** Remembers what this batch saw (`nowNs`: when, for the watermark if a stream must be forgotten). */
      commit(nowNs: bigint): void {
        for (const [key, state] of staged) touch(key, state, nowNs);
        for (const key of stagedDeltas) {
          deltas.add(key);
          // The last maxStreams delta points are remembered: a retry of one of them counts once.
          while (deltas.size > opts.maxStreams) deltas.delete(deltas.values().next().value!);
        }
      },
    };
  }

  return {
    begin,
    /** One point in a batch of its own, remembered at once. */
    delta(p: ToolPoint, nowNs: bigint): PointDelta | null {
      const b = begin();
      const d = b.delta(p);
      b.commit(nowNs);
      return d;
    },
    size: () => streams.size + deltas.size,
  };
}

/**
 * The duration bucket `i` of a layout stands for (ms): its bounds and the latency its calls get.
 * Explicit: the midpoint; the first bucket (0, b0] half its bound; the overflow bucket its lower
 * bound. Exponential: the zero bucket half its threshold (0 for the SDKs' threshold 0); bucket
 * (base^index, base^(index+1)] its geometric middle base^(index + 1/2), within a factor
 * sqrt(base) of every value in it (0.00003% at scale 20, 41% at scale 0).
 */
export function bucketRange(layout: BucketLayout, i: number): { lower: number; upper: number | null; middle: number } {
  if (layout.kind === 'explicit') {
    const b = layout.boundsMs;
    const lower = i === 0 ? 0 : Math.max(0, b[i - 1]!);
    const upper = i < b.length ? b[i]! : null;
    return { lower, upper, middle: upper === null ? lower : (lower + Math.max(lower, upper)) / 2 };
  }
  if (i === 0) return { lower: 0, upper: layout.zeroThresholdMs, middle: layout.zeroThresholdMs / 2 };
  const index = layout.offset + i - 1;
  // base^x = 2^(x / 2^scale); beyond a double it is Infinity (clamped below), under it 0.
  const at = (x: number) => 2 ** (x / 2 ** layout.scale) * layout.msPerUnit;
  return { lower: at(index), upper: at(index + 1), middle: at(index + 0.5) };
}

/**
 * The latencies a delta stands for (docs/telemetry.md): each call of a bucket gets what its
 * bucket stands for (`bucketRange`). When every call of the delta is in one bucket and the sum is
 * known, they get the exact mean instead (if it lies in the bucket). Latencies are clamped to
 * what a report may carry.
 */
export function latenciesOf(delta: PointDelta, layout: BucketLayout): { latencyMs: number; count: number }[] {
  const clamp = (x: number) => Math.min(REPORT_LIMITS.latencyMaxMs, Math.max(0, Math.round(x * 1000) / 1000));
  if (delta.counts.length === 0) {
    return delta.sumMs === undefined || delta.count <= 0 ? [] : [{ latencyMs: clamp(delta.sumMs / delta.count), count: delta.count }];
  }
  const nonEmpty = delta.counts.filter((c) => c > 0).length;
  const out: { latencyMs: number; count: number }[] = [];
  for (let i = 0; i < delta.counts.length; i++) {
    const c = delta.counts[i]!;
    if (c <= 0) continue;
    const { lower, upper, middle } = bucketRange(layout, i);
    let latency = middle;
    if (nonEmpty === 1 && delta.sumMs !== undefined) {
      const mean = delta.sumMs / c;
      if (mean >= lower && (upper === null || mean <= upper)) latency = mean;
    }
    out.push({ latencyMs: clamp(latency), count: c });
  }
  return out;
}
