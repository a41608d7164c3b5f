// OTLP metrics -> MCP tool calls (docs/telemetry.md "The metric"). The MCP conventions define the
// histogram `mcp.client.operation.duration` (unit s, attributes as on the client span, no per-call
// values): a point adds counts per latency bucket. Cumulative points become deltas per stream, so
// a re-export never counts twice; each call of a delta becomes one report whose latency stands
// for its bucket. Pure: time is an argument; the stream memory is bounded.

import type { ExportMetricsServiceRequest } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { AggregationTemporality, type HistogramDataPoint, type Metric } from '../../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { attributeMap, fingerprint, resourceFingerprint } from './otlp-attributes.js';
import { ERROR_TYPE, httpStatusOf, HTTP_STATUS, LEGACY_HTTP_URL, MCP_METHOD, MCP_TOOLS_CALL, SERVER_ADDRESS, SERVER_PORT, TOOL_NAME, URL_FULL } from './otlp-spans.js';
import { REPORT_LIMITS } from './telemetry.js';

export const MCP_CLIENT_DURATION = 'mcp.client.operation.duration';

/**
 * Most buckets one histogram point may have (docs/telemetry.md): twice the 160 of the OpenTelemetry
 * SDKs' default exponential histogram, twenty times the conventions' 15 explicit buckets. A
 * point's buckets are read, and its stream remembers them, so without a bound one 4 MiB export of
 * one point held 12 MB of memory for as long as its stream was remembered (up to
 * OTLP_METRIC_STREAMS of them).
 */
export const MAX_POINT_BUCKETS = 320;

/** Why an `mcp.client.operation.duration` tools/call point could not be read. */
export type InvalidReason = 'kind' | 'unit' | 'temporality' | 'time' | 'buckets' | 'too_many_buckets';

const POINT_ATTRIBUTES = [MCP_METHOD, TOOL_NAME, ERROR_TYPE, SERVER_ADDRESS, SERVER_PORT, URL_FULL, LEGACY_HTTP_URL, HTTP_STATUS] as const;

/** One histogram point of `mcp.client.operation.duration` for `tools/call`, bounds in milliseconds. */
export interface ToolPoint {
  /** Fingerprint of the resource (spans from the same resource take precedence). */
  resource: string;
  /** Fingerprint of resource + scope + metric + point attributes: one cumulative series. */
  stream: string;
  temporality: 'cumulative' | 'delta';
  startNs: bigint;
  timeNs: bigint;
  boundsMs: number[];
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

/** What is wrong with an explicit-bucket point's buckets, or null. Work and memory bounded by MAX_POINT_BUCKETS. */
function explicitProblem(p: HistogramDataPoint): InvalidReason | null {
  const b = p.explicitBounds;
  if (p.bucketCounts.length > MAX_POINT_BUCKETS || b.length > MAX_POINT_BUCKETS) return 'too_many_buckets';
  if (p.bucketCounts.length === 0) return b.length === 0 ? null : 'buckets';
  if (p.bucketCounts.length !== b.length + 1) return 'buckets';
  for (let i = 0; i < b.length; i++) if (!Number.isFinite(b[i]!) || (i > 0 && b[i]! <= b[i - 1]!)) return 'buckets';
  let n = 0n;
  for (const c of p.bucketCounts) n += c;
  return n === p.count ? null : 'buckets';
}

export function readMetrics(req: ExportMetricsServiceRequest): MetricsReading {
  const out: MetricsReading = { points: [], other: 0, invalid: 0, invalidWhy: {}, total: 0 };
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
        if (m.data.case !== 'histogram') {
          // Exponential histograms, or the name on another kind: not read (docs/telemetry.md).
          refuse(out, 'kind', n);
          continue;
        }
        const h = m.data.value;
        const scale = msPerUnit(m.unit);
        const temporality = h.aggregationTemporality === AggregationTemporality.CUMULATIVE ? 'cumulative' : h.aggregationTemporality === AggregationTemporality.DELTA ? 'delta' : null;
        for (const p of h.dataPoints) {
          const a = attributeMap(p.attributes, POINT_ATTRIBUTES);
          if (text(a.get(MCP_METHOD)) !== MCP_TOOLS_CALL) {
            out.other++;
            continue;
          }
          if (scale === null || temporality === null) {
            refuse(out, scale === null ? 'unit' : 'temporality');
            continue;
          }
          const why = p.timeUnixNano <= 0n ? 'time' : explicitProblem(p);
          if (why !== null) {
            refuse(out, why);
            continue;
          }
          resource ??= resourceFingerprint(resourceAttrs);
          const port = a.get(SERVER_PORT);
          out.points.push({
            resource,
            stream: fingerprint(resourceAttrs, sm.scope?.name ?? '', sm.scope?.version ?? '', m.name, m.unit, p.attributes),
            temporality,
            startNs: p.startTimeUnixNano,
            timeNs: p.timeUnixNano,
            boundsMs: p.explicitBounds.map((x) => x * scale),
            counts: p.bucketCounts,
            count: p.count,
            sumMs: p.sum === undefined ? undefined : p.sum * scale,
            success: text(a.get(ERROR_TYPE)) === null,
            toolName: text(a.get(TOOL_NAME)),
            url: text(a.get(URL_FULL)) ?? text(a.get(LEGACY_HTTP_URL)),
            httpStatus: httpStatusOf(a.get(HTTP_STATUS)),
            serverAddress: text(a.get(SERVER_ADDRESS)),
            serverPort: typeof port === 'number' && Number.isInteger(port) && port > 0 && port <= 65535 ? port : null,
          });
        }
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

/** What a stream remembers of its last point: the counts and bounds copied into typed arrays (8 bytes a bucket), not the decoded export's. */
interface StreamState {
  startNs: bigint;
  timeNs: bigint;
  counts: BigUint64Array;
  count: bigint;
  sumMs: number | undefined;
  bounds: Float64Array;
}

function sameBounds(a: Float64Array, b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
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
        const remember = () => staged.set(p.stream, { startNs: p.startNs, timeNs: p.timeNs, counts: BigUint64Array.from(p.counts), count: p.count, sumMs: p.sumMs, bounds: Float64Array.from(p.boundsMs) });
        if (!prev) {
          remember();
          return p.startNs >= watermark && p.startNs > 0n && p.count > 0n ? full(p) : null;
        }
        if (p.startNs === prev.startNs && p.timeNs <= prev.timeNs) return null; // a re-export or an older point
        remember();
        const reset = p.startNs !== prev.startNs || p.count < prev.count || p.counts.some((c, i) => c < (prev.counts[i] ?? 0n));
        if (reset || !sameBounds(prev.bounds, p.boundsMs)) {
          // A new start: the stream restarted after the one we followed, so none of it was counted.
          // Same start with other buckets: nothing can be told apart; only a new baseline.
          return reset && p.startNs > prev.startNs && p.count > 0n ? full(p) : null;
        }
        const count = Number(p.count - prev.count);
        if (count === 0) return null;
        return {
          counts: p.counts.map((c, i) => Number(c - prev.counts[i]!)),
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
 * The latencies a delta stands for (docs/telemetry.md): each call of a bucket gets the bucket's
 * midpoint; the first bucket (0, b0] half its upper bound; the overflow bucket its lower bound.
 * When every call of the delta is in one bucket and the sum is known, they get the exact mean
 * instead. Latencies are clamped to what a report may carry.
 */
export function latenciesOf(delta: PointDelta, boundsMs: readonly number[]): { latencyMs: number; count: number }[] {
  const clamp = (x: number) => Math.min(REPORT_LIMITS.latencyMaxMs, Math.max(0, Math.round(x * 1000) / 1000));
  if (delta.counts.length === 0) {
    return delta.sumMs === undefined || delta.count <= 0 ? [] : [{ latencyMs: clamp(delta.sumMs / delta.count), count: delta.count }];
  }
  const nonEmpty = delta.counts.filter((c) => c > 0).length;
  const out: { latencyMs: number; count: number }[] = [];
  for (let i = 0; i < delta.counts.length; i++) {
    const c = delta.counts[i]!;
    if (c <= 0) continue;
    const lower = i === 0 ? 0 : Math.max(0, boundsMs[i - 1]!);
    const upper = i < boundsMs.length ? boundsMs[i]! : null;
    let latency = upper === null ? lower : (lower + Math.max(lower, upper)) / 2;
    if (nonEmpty === 1 && delta.sumMs !== undefined) {
      const mean = delta.sumMs / c;
      if (mean >= lower && (upper === null || mean <= upper)) latency = mean;
    }
    out.push({ latencyMs: clamp(latency), count: c });
  }
  return out;
}
