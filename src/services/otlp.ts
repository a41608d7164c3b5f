import type { DescMessage, MessageInitShape, MessageShape } from '@bufbuild/protobuf';
import { createContextKey, createContextValues } from '@connectrpc/connect';
import { setImmediate as nextTurnOfTheLoop } from 'node:timers/promises';
import type { ExportMetricsServiceResponseSchema } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import type { ExportTraceServiceResponseSchema } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import type { ReportRequest } from '../../gen/observatory/v1/telemetry_pb.js';
import { exportPieces, measuring, METRICS_SPINE, TRACES_SPINE, type ExportSpine, type OtlpExportBytes } from '../domain/otlp-export.js';
import { createSpanJoin, type Joined } from '../domain/otlp-join.js';
import { createHistogramStreams, EXPONENTIAL_SCALES, latenciesOf, MAX_POINT_BUCKETS, readMetrics, type InvalidReason, type MetricsReading } from '../domain/otlp-metrics.js';
import { readTraces, type TracesReading } from '../domain/otlp-spans.js';
import { ObservatoryError } from '../errors.js';
import { clientAddressKey, requestHeaderValue, type CallContext, type ServiceDeps } from './context.js';
import { serverResolver } from './otlp-servers.js';
import type { TelemetryService } from './telemetry.js';

// The OTLP receivers (docs/telemetry.md): OpenTelemetry traces and metrics in, telemetry reports
// out, through the one ingestion path (TelemetryService.reportMany: the same validation, server
// tracking, report source and group commit as POST /api/report). Transport-free: the OTLP/HTTP
// routes and the OTLP/gRPC services call these two functions. Nothing of an export is kept but
// the five report fields; span ids, attribute fingerprints and the caller's key or address live
// in memory only, for the join window and the metric streams.

/** Most reports one metrics export may add (a histogram point can claim any number of calls). */
export const MAX_METRIC_REPORTS_PER_EXPORT = 10_000;
/** How long metrics of a resource are ignored after it sent MCP tool-call spans. */
export const SPANS_PRECEDENCE_MS = 60 * 60 * 1000;

export type OtlpSignal = 'traces' | 'metrics';
/** What became of each span or data point (the /metrics counter's `outcome` label). */
export type OtlpOutcome = 'report' | 'ignored' | 'invalid' | 'unresolved' | 'held' | 'duplicate' | 'superseded' | 'over_limit' | 'no_new_calls';

/**
 * The bytes of an OTLP/gRPC export (TraceService and MetricsService Export), read by
 * src/http/otlp-grpc.ts before connect-es would decode them: the service decodes them itself.
 */
export const otlpExportKey = createContextKey<OtlpExportBytes | null>(null, { description: 'the bytes of an OTLP/gRPC export' });

/**
 * Exports are decoded one at a time (per process), in the order they were measured. Decoding
 * yields to the event loop between pieces, so without this every export in flight would hold its
 * current piece (and an OTLP/JSON export its parsed body) at once; the others wait holding only
 * their bytes, which the request body budget already counts.
 */
function decodeQueue() {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(work: () => Promise<T>): Promise<T> => {
    const run = tail.then(work, work);
    tail = run.catch(() => undefined);
    return run;
  };
}

/** Only what the report source needs, detached from the request: the Bearer key and the client address. */
function sourceContext(ctx: CallContext | undefined): CallContext {
  const headers = new Headers();
  const auth = requestHeaderValue(ctx, 'authorization');
  if (auth) headers.set('authorization', auth);
  // The export's "caller gone" travels with its rows: rows of an export whose client left before
  // their write began are not written (src/store/group-commit.ts), as for a REST report.
  return { requestHeader: headers, values: createContextValues().set(clientAddressKey, ctx?.values.get(clientAddressKey)), signal: ctx?.signal };
}

const noSpans = (): TracesReading => ({ calls: [], children: [], other: 0, invalid: 0, total: 0 });
const noPoints = (): MetricsReading => ({ points: [], other: 0, invalid: 0, invalidWhy: {}, total: 0 });

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** Why an mcp.client.operation.duration point was not read, as the partial success says it (docs/telemetry.md). */
const UNREADABLE: Record<InvalidReason, string> = {
  kind: 'not a histogram: explicit-bucket and exponential histograms are read',
  unit: 'a unit other than s or ms',
  temporality: 'neither delta nor cumulative',
  time: 'no time',
  buckets: 'inconsistent buckets: bucket counts (with the zero count) that do not add up to count, explicit bounds that are not finite and increasing, or a zero threshold that is not a finite number of at least 0',
  too_many_buckets: `more than ${MAX_POINT_BUCKETS} buckets`,
  scale: `an exponential scale outside ${EXPONENTIAL_SCALES.min} to ${EXPONENTIAL_SCALES.max}`,
  range: 'exponential buckets beyond the largest double: base^index overflows',
  negative: 'calls in negative exponential buckets: a duration is never negative',
};

export function createOtlpService(deps: ServiceDeps, { telemetry }: { telemetry: TelemetryService }, opts: { onError?: (err: unknown) => void } = {}) {
  const cfg = deps.config.otlp;
  const servers = serverResolver(deps.db);
  const join = createSpanJoin<CallContext>({ windowMs: cfg.joinWindowMs, maxSpans: cfg.joinMaxSpans });
  const streams = createHistogramStreams({ maxStreams: cfg.metricStreams, watermarkNs: BigInt(deps.now().getTime()) * 1_000_000n });
  // Resources that sent MCP tool-call spans lately: their mcp.client.operation.duration points
  // describe the same calls, so they are not counted again (docs/telemetry.md).
  const spanResources = new Map<string, number>();
  const count = (signal: OtlpSignal, outcome: OtlpOutcome, n: number) => {
    if (n > 0) deps.observe?.otlpItems?.(signal, outcome, n);
  };

  function noteSpanResource(resource: string, nowMs: number): void {
    spanResources.delete(resource);
    spanResources.set(resource, nowMs);
    while (spanResources.size > cfg.metricStreams) spanResources.delete(spanResources.keys().next().value!);
  }

  /** Writes joined calls through the telemetry path; per entry: true = a report, 'unresolved', or false = invalid. */
  async function write(entries: readonly Joined<CallContext>[]): Promise<(true | false | 'unresolved')[]> {
    const result: (true | false | 'unresolved')[] = entries.map(() => 'unresolved');
    const byOrigin = new Map<CallContext, { index: number[]; inputs: Partial<ReportRequest>[] }>();
    for (let i = 0; i < entries.length; i++) {
      const { call, child, origin } = entries[i]!;
      let serverUrl: string | null = null;
      for (const url of [child?.url ?? null, call.url]) {
        if (url === null) continue;
        serverUrl = await servers.resolve({ url, serverAddress: null, serverPort: null });
        if (serverUrl !== null) break;
      }
      serverUrl ??= await servers.resolve({ url: null, serverAddress: call.serverAddress, serverPort: call.serverPort });
      if (serverUrl === null) continue;
      let group = byOrigin.get(origin);
      if (!group) byOrigin.set(origin, (group = { index: [], inputs: [] }));
      group.index.push(i);
      const httpStatus = child?.httpStatus ?? call.httpStatus;
      group.inputs.push({ serverUrl, success: call.success, latencyMs: call.latencyMs, toolName: call.toolName ?? undefined, httpStatus: httpStatus ?? undefined });
    }
    for (const [origin, g] of byOrigin) {
      const r = await telemetry.reportMany(g.inputs, origin);
      r.ok.forEach((ok, k) => (result[g.index[k]!] = ok));
    }
    return result;
  }

  function tally(signal: OtlpSignal, results: readonly (true | false | 'unresolved')[]) {
    const reports = results.filter((r) => r === true).length;
    const invalid = results.filter((r) => r === false).length;
    count(signal, 'report', reports);
    count(signal, 'invalid', invalid);
    count(signal, 'unresolved', results.length - reports - invalid);
    return { reports, invalid, unresolved: results.length - reports - invalid };
  }

  /** Held calls whose window ended: written without a child (their own URL or address). */
  async function flushExpired(all: boolean): Promise<void> {
    const due = all ? join.drain() : join.expire(deps.now().getTime());
    if (due.length > 0) tally('traces', await write(due));
  }

  let flushing: Promise<void> | null = null;
  const timer =
    cfg.joinWindowMs > 0
      ? setInterval(
          () => {
            flushing ??= flushExpired(false)
              .catch((err) => opts.onError?.(err))
              .finally(() => (flushing = null));
          },
          Math.max(50, Math.min(1000, Math.floor(cfg.joinWindowMs / 2))),
        )
      : null;
  timer?.unref();

  const inTurn = decodeQueue();
  /**
   * Reads an export in its turn (docs/telemetry.md "What an export may cost"): measured on its
   * bytes and refused whole, before anything of it is built, when it holds more than
   * OTLP_MAX_EXPORT_ELEMENTS elements; then decoded a piece at a time, each piece read into `out`
   * and dropped. Each step (a part of the measurement, a piece) runs in a turn of the event loop
   * of its own: between two steps, of this export or the next, the loop serves everything else.
   * Throws OtlpExportRefused.
   */
  function readExport<Desc extends DescMessage, R>(spine: ExportSpine<Desc>, input: OtlpExportBytes, ctx: CallContext | undefined, out: R, read: (piece: MessageShape<Desc>, out: R) => unknown): Promise<R> {
    // An export whose client left is not read on (as its rows would not be written): a client
    // that sends and leaves costs no decoding, however many it queued.
    const step = async () => {
      await nextTurnOfTheLoop();
      if (ctx?.signal?.aborted === true) {
        throw new ObservatoryError('unavailable', 'the request was abandoned before its export was read; nothing was stored', { headers: { 'retry-after': '1' } });
      }
    };
    return inTurn(async () => {
      const measure = measuring(spine, input, cfg.maxExportElements);
      do await step();
      while (!measure.next().done);
      const pieces = exportPieces(spine, input);
      for (;;) {
        await step();
        const p = pieces.next();
        if (p.done) return out;
        read(p.value, out);
      }
    });
  }

  return {
    /** Largest export accepted, as received and after decompression (OTLP_MAX_EXPORT_BYTES). */
    maxExportBytes: cfg.maxExportBytes,

    /** OTLP TraceService.Export: MCP client tools/call spans become reports. Throws OtlpExportRefused for an export it does not read. */
    async exportTraces(input: OtlpExportBytes, ctx?: CallContext): Promise<MessageInitShape<typeof ExportTraceServiceResponseSchema>> {
      const reading = await readExport(TRACES_SPINE, input, ctx, noSpans(), readTraces);
      const nowMs = deps.now().getTime();
      for (const c of reading.calls) noteSpanResource(c.resource, nowMs);
      const origin = sourceContext(ctx);
      const offer = join.offer(reading, origin, nowMs);
      let results: (true | false | 'unresolved')[];
      try {
        results = await write(offer.ready);
      } catch (err) {
        // Not stored (the database failed): the sender retries, and its spans must count then.
        join.forget(reading.calls.map((c) => c.joinKey));
        throw err;
      }
      const own: (true | false | 'unresolved')[] = [];
      const earlier: (true | false | 'unresolved')[] = [];
      offer.ready.forEach((e, i) => (e.origin === origin ? own : earlier).push(results[i]!));
      const mine = tally('traces', own);
      tally('traces', earlier);
      const joinedChildren = reading.children.filter((c) => offer.joinedKeys.has(c.parentKey)).length;
      const unusedChildren = reading.children.length - joinedChildren;
      count('traces', 'held', offer.held);
      count('traces', 'duplicate', offer.duplicates);
      count('traces', 'ignored', reading.other + unusedChildren);
      count('traces', 'invalid', reading.invalid);
      const rejected = reading.other + unusedChildren + reading.invalid + mine.invalid + mine.unresolved;
      if (rejected === 0) return {};
      const why: string[] = [];
      if (reading.other > 0) why.push(`${plural(reading.other, 'span is', 'spans are')} not MCP client tool calls (only spans with mcp.method.name "tools/call" and kind CLIENT become reports)`);
      if (unusedChildren > 0) {
        why.push(
          `${plural(unusedChildren, 'HTTP client span')} had no MCP tool-call parent in this export (${cfg.joinWindowMs > 0 ? `kept ${cfg.joinWindowMs} ms for a parent in a later export, then dropped` : 'dropped'})`,
        );
      }
      if (reading.invalid > 0) why.push(`${plural(reading.invalid, 'MCP tool-call span')} had no usable duration (start and end time, at most one hour)`);
      if (mine.unresolved > 0) {
        why.push(`${plural(mine.unresolved, 'MCP tool-call span')} named no server (no url.full on the span or its HTTP child span, and no server.address; or a server.address whose origin has several tracked servers, none or more than one of them established there, i.e. in the catalogue or with evidence from more than one source family: ambiguous, send url.full)`);
      }
      if (mine.invalid > 0) why.push(`${plural(mine.invalid, 'MCP tool-call span')} failed report validation (e.g. gen_ai.tool.name longer than 200 characters)`);
      return { partialSuccess: { rejectedSpans: BigInt(rejected), errorMessage: `${rejected} of ${reading.total} spans were not recorded: ${why.join('; ')}. See docs/telemetry.md of the observatory.` } };
    },

    /** OTLP MetricsService.Export: mcp.client.operation.duration tools/call points become reports. Throws OtlpExportRefused for an export it does not read. */
    async exportMetrics(input: OtlpExportBytes, ctx?: CallContext): Promise<MessageInitShape<typeof ExportMetricsServiceResponseSchema>> {
      const reading = await readExport(METRICS_SPINE, input, ctx, noPoints(), readMetrics);
      const nowMs = deps.now().getTime();
      const nowNs = BigInt(nowMs) * 1_000_000n;
      let superseded = 0;
      let overLimit = 0;
      let unresolved = 0;
      let quiet = 0;
      const pointOf: number[] = [];
      const inputs: Partial<ReportRequest>[] = [];
      const batch = streams.begin();
      for (let i = 0; i < reading.points.length; i++) {
        const p = reading.points[i]!;
        const delta = batch.delta(p);
        const spansAt = spanResources.get(p.resource);
        if (spansAt !== undefined && nowMs - spansAt < SPANS_PRECEDENCE_MS) {
          // Followed all the same, so that the stream never counts these calls later.
          superseded++;
          continue;
        }
        if (delta === null) {
          quiet++;
          continue;
        }
        if (inputs.length + delta.count > MAX_METRIC_REPORTS_PER_EXPORT) {
          overLimit++;
          continue;
        }
        const serverUrl = await servers.resolve(p);
        if (serverUrl === null) {
          unresolved++;
          continue;
        }
        for (const { latencyMs, count: n } of latenciesOf(delta, p.layout)) {
          for (let k = 0; k < n; k++) {
            inputs.push({ serverUrl, success: p.success, latencyMs, toolName: p.toolName ?? undefined, httpStatus: p.httpStatus ?? undefined });
            pointOf.push(i);
          }
        }
      }
      const r = await telemetry.reportMany(inputs, sourceContext(ctx));
      // Only now (the reports are stored) are the streams advanced: a failed export is retried whole.
      batch.commit(nowNs);
      const invalidPoints = new Set<number>();
      r.ok.forEach((ok, k) => {
        if (!ok) invalidPoints.add(pointOf[k]!);
      });
      count('metrics', 'report', r.accepted);
      count('metrics', 'ignored', reading.other);
      count('metrics', 'invalid', reading.invalid + invalidPoints.size);
      count('metrics', 'superseded', superseded);
      count('metrics', 'over_limit', overLimit);
      count('metrics', 'unresolved', unresolved);
      count('metrics', 'no_new_calls', quiet);
      const rejected = reading.other + reading.invalid + superseded + overLimit + unresolved + invalidPoints.size;
      if (rejected === 0) return {};
      const why: string[] = [];
      if (reading.other > 0) why.push(`${plural(reading.other, 'data point is', 'data points are')} not mcp.client.operation.duration points for mcp.method.name "tools/call"`);
      for (const [reason, n] of Object.entries(reading.invalidWhy) as [InvalidReason, number][]) {
        why.push(`${plural(n, 'mcp.client.operation.duration point')} could not be read (${UNREADABLE[reason]})`);
      }
      if (superseded > 0) why.push(`${plural(superseded, 'point')} came from a resource that also exports MCP tool-call spans, which are counted instead`);
      if (overLimit > 0) why.push(`${plural(overLimit, 'point')} would have added more than ${MAX_METRIC_REPORTS_PER_EXPORT} calls to one export`);
      if (unresolved > 0) why.push(`${plural(unresolved, 'point')} named no server (no server.address; or one whose origin has several tracked servers, none or more than one of them in the catalogue or with evidence from more than one source family: ambiguous, send url.full)`);
      if (invalidPoints.size > 0) why.push(`${plural(invalidPoints.size, 'point')} failed report validation (e.g. gen_ai.tool.name longer than 200 characters)`);
      return {
        partialSuccess: { rejectedDataPoints: BigInt(rejected), errorMessage: `${rejected} of ${reading.total} data points were not recorded: ${why.join('; ')}. See docs/telemetry.md of the observatory.` },
      };
    },

    /** Writes every held span now (they were acknowledged) and stops the join timer. */
    async close(): Promise<void> {
      if (timer) clearInterval(timer);
      await flushing;
      await flushExpired(true).catch((err) => opts.onError?.(err));
    },
  };
}

export type OtlpService = ReturnType<typeof createOtlpService>;
