import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ReportRequest, ReportResponseSchema, ReportStreamRequest, ReportStreamResponseSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { classifyCategory } from '../domain/category.js';
import { slidingWindowDecision } from '../domain/access.js';
import { serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { OBSERVATORY_SOURCE } from '../domain/scoring.js';
import { parseReport } from '../domain/telemetry.js';
import { isRefusedValueError } from '../db/index.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { contractViolation } from './contract.js';
import { INGEST_MAX_BATCH, ingestBatcher } from '../store/ingest-batcher.js';
import { BoundedMap } from '../store/cache-limits.js';
import { serverCache } from '../store/server-cache.js';
import { serverCreationStore } from '../store/server-creations.js';
import { retryOnIdentityConflict, serverStore, type ServerRow } from '../store/servers.js';
import type { IngestRow } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { reportSourceResolver, type ReportSource } from './report-source.js';

/** Reports of one stream written per group-commit submission. */
const STREAM_CHUNK = 500;
/** Rejections listed in a ReportStream answer (`rejected` always counts them all). */
const MAX_REJECTIONS_LISTED = 100;

/** A value the database refused (validation should have caught it first) is the client's error. */
function refusedValue(err: unknown): unknown {
  return isRefusedValueError(err) ? invalidArgument('the report contains characters that cannot be stored (e.g. NUL)') : err;
}

/** New servers counted against a source within this window (NEW_SERVERS_PER_SOURCE_PER_HOUR). */
const CREATION_WINDOW_MS = 3_600_000;
/** Reports of one request prepared at once (their look-ups share a statement per event-loop turn). */
const PREPARE_GROUP = 256;

/** TelemetryService: THE implementation of POST /api/report and its RPCs. */
export function createTelemetryService({ db, config, now, observe }: ServiceDeps) {
  const servers = serverCache(db);
  const ingest = ingestBatcher(db, { onBatch: observe?.ingestBatch });
  const sourceOf = reportSourceResolver(db);
  const perHour = config.newServersPerSourcePerHour;

  /**
   * Source families refused a new server, until when (epoch ms): the window only empties as time
   * passes, so a refusal holds until its Retry-After on every instance, and each further report on
   * a new server is refused here without the creation transaction (an OTLP export naming 40,000
   * URLs was 200,000 statements under the family's lock). Bounded like every cache.
   */
  const refusedUntil = new BoundedMap<string, number>();
  const creationRefused = (url: string, retryAfterSeconds: number) =>
    new ObservatoryError(
      'rate_limited',
      `at most ${perHour} new servers per hour from one source (a network, with the keys reporting from it); ${url} is not tracked yet. Reports on tracked servers are accepted; retry in ${retryAfterSeconds} s`,
      { headers: { 'retry-after': String(retryAfterSeconds) }, extra: { retry_after_seconds: retryAfterSeconds } },
    );

  /**
   * Tracks a new server for a report (docs/integrity.md "New servers per source"): at most
   * NEW_SERVERS_PER_SOURCE_PER_HOUR per source family and hour, counted across instances under a
   * lock on the family; over it the report is refused (429, nothing is written). In-process
   * callers without an address are not limited.
   */
  async function createForReport(url: string, toolName: string | null, source: ReportSource, at: Date): Promise<ServerRow> {
    const name = serverNameFromUrl(url);
    const fresh = { url, name, slug: slugify(name), category: classifyCategory([name, toolName ?? '']) };
    const keys = perHour > 0 ? await source.limitKeys() : [];
    if (keys.length === 0) return create(url, fresh, keys, at);
    // One creation of a family at a time in this process (the advisory lock orders them across
    // instances anyway): a refusal found by one is seen by the next before its transaction.
    return inLane(keys[0]!, async () => {
      const until = refusedUntil.get(keys[0]!);
      if (until !== undefined && at.getTime() < until) throw creationRefused(url, Math.max(1, Math.ceil((until - at.getTime()) / 1000)));
      return create(url, fresh, keys, at);
    });
  }

  /** Creations waiting per source family in this process: each runs after the one before it. */
  const lanes = new Map<string, Promise<void>>();
  async function inLane<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const before = lanes.get(key) ?? Promise.resolve();
    let done!: () => void;
    const tail = before.then(() => new Promise<void>((resolve) => (done = resolve)));
    lanes.set(key, tail);
    await before;
    try {
      return await fn();
    } finally {
      done();
      if (lanes.get(key) === tail) lanes.delete(key);
    }
  }

  /** The creation transaction: the family's window under its lock, then the new row. */
  function create(url: string, fresh: Parameters<ReturnType<typeof serverStore>['insertNew']>[0], keys: string[], at: Date): Promise<ServerRow> {
    return retryOnIdentityConflict(() =>
      db.transaction(async (tx) => {
        const creations = serverCreationStore(tx);
        if (keys.length > 0) {
          await creations.lock(keys[0]!);
          const decision = slidingWindowDecision(await creations.since(keys, new Date(at.getTime() - CREATION_WINDOW_MS)), at, perHour, CREATION_WINDOW_MS);
          if (!decision.allowed) {
            refusedUntil.set(keys[0]!, at.getTime() + decision.retryAfterSeconds * 1000);
            throw creationRefused(url, decision.retryAfterSeconds);
          }
        }
        const store = serverStore(tx);
        const row = await store.insertNew(fresh, at);
        if (!row) return (await store.byUrl(url))!;
        if (keys.length > 0) {
          await creations.record(keys[0]!, at);
          await creations.purgeBefore(new Date(at.getTime() - CREATION_WINDOW_MS));
        }
        return row;
      }),
    );
  }

  /**
   * Validates one report and resolves its server; the row is not written yet. `source` may be
   * given when the caller resolved it once for many reports of one request.
   */
  async function prepare(input: Partial<ReportRequest>, ctx: CallContext | undefined, given?: ReportSource): Promise<IngestRow> {
    // THE acceptance decision (domain/telemetry.ts), the same for REST, Connect, the stream and OTLP.
    const parsed = parseReport({
      server_url: input.serverUrl,
      success: input.success,
      latency_ms: input.latencyMs,
      tool_name: input.toolName,
      http_status: input.httpStatus,
    });
    if ('problem' in parsed) throw contractViolation(parsed.violations);
    const url = parsed.server_url;
    const at = now();
    const toolName = parsed.tool_name;
    const source = given ?? (await sourceOf(ctx, at));
    // The server the URL means: its query is dropped unless a catalogue server has that exact URL.
    const server = await servers.forReport(url, (bare) => createForReport(bare, toolName, source, at));
    // Reported tool names refine a category the URL alone could not tell.
    if (server.category === 'general' && toolName) {
      const refined = classifyCategory([server.name, toolName]);
      if (refined !== 'general') await servers.setCategory(server, refined);
    }
    return {
      serverId: server.id,
      // The report counts for the server its URL means (a query no catalogue entry has is dropped).
      report: { ...parsed, server_url: server.url },
      at,
      source: source.id,
    };
  }

  return {
    async report(req: Partial<ReportRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportResponseSchema>> {
      try {
        const row = await prepare(req, ctx);
        // Resolves after the group-commit transaction carrying this row committed; not written at
        // all if the caller leaves before its transaction begins (ctx.signal).
        await ingest.submit([row], ctx?.signal);
        return { recorded: true, serverUrl: row.report.server_url };
      } catch (err) {
        throw refusedValue(err);
      }
    },

    /**
     * Many reports of one request (an OTLP export): each validated exactly like a single report,
     * all from the request's one source, written through the same group commit in chunks of at
     * most INGEST_MAX_BATCH rows. Resolves after every accepted row committed; `ok[i]` says
     * whether `inputs[i]` was accepted (a rejected one is invalid, never an error of the call).
     */
    async reportMany(inputs: readonly Partial<ReportRequest>[], ctx?: CallContext): Promise<{ accepted: number; rejected: number; ok: boolean[] }> {
      if (inputs.length === 0) return { accepted: 0, rejected: 0, ok: [] };
      const source = await sourceOf(ctx, now());
      const rows: IngestRow[] = [];
      const ok: boolean[] = [];
      // Prepared PREPARE_GROUP at a time, so the look-ups of a group's servers nobody has read
      // lately share one statement (src/store/per-turn.ts) instead of one each.
      for (let i = 0; i < inputs.length; i += PREPARE_GROUP) {
        const group = await Promise.allSettled(inputs.slice(i, i + PREPARE_GROUP).map((input) => prepare(input, ctx, source)));
        for (const r of group) {
          if (r.status === 'fulfilled') {
            rows.push(r.value);
            ok.push(true);
            continue;
          }
          if (!(r.reason instanceof ObservatoryError) || r.reason.status >= 500) throw r.reason;
          ok.push(false);
        }
      }
      // One chunk after the other: the group commit's queue holds a bounded number of rows (an
      // export of any size fits), and its writes run one at a time anyway.
      for (let i = 0; i < rows.length; i += INGEST_MAX_BATCH) await ingest.submit(rows.slice(i, i + INGEST_MAX_BATCH), ctx?.signal);
      return { accepted: rows.length, rejected: inputs.length - rows.length, ok };
    },

    /**
     * One probe of the observatory's own (active observation) as telemetry: the same five fields,
     * the same group-commit ingestion, from the source OBSERVATORY_SOURCE, which the scoring model
     * weighs below any agent (docs/integrity.md, docs/observation.md).
     */
    async recordObservation(o: { serverId: number; serverUrl: string; success: boolean; latencyMs: number; httpStatus: number | null }): Promise<void> {
      const latency = Math.max(0, Math.round(o.latencyMs * 10) / 10);
      await ingest.submit([
        {
          serverId: o.serverId,
          report: { server_url: o.serverUrl, success: o.success, latency_ms: latency, tool_name: null, http_status: o.httpStatus },
          at: now(),
          source: OBSERVATORY_SOURCE,
        },
      ]);
    },

    async reportStream(reqs: AsyncIterable<ReportStreamRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportStreamResponseSchema>> {
      let accepted = 0;
      let rejected = 0;
      const rejections: { index: number; serverUrl: string; code: string; detail: string }[] = [];
      const reject = (index: number, serverUrl: string, code: string, detail: string) => {
        rejected++;
        if (rejections.length < MAX_REJECTIONS_LISTED) rejections.push({ index, serverUrl, code, detail });
      };
      // A stream's reports travel in chunks of up to STREAM_CHUNK rows through the same group
      // commit; the response is sent only after every accepted row committed. Each row is its own
      // submission, so a row the database still refuses (validation should have caught it) fails
      // alone: the group commit retries a failed batch submission by submission.
      let chunk: { row: IngestRow; index: number; serverUrl: string }[] = [];
      let writing: Promise<void> = Promise.resolve();
      const flush = async () => {
        const rows = chunk;
        chunk = [];
        await writing;
        writing = Promise.all(
          rows.map((r) =>
            ingest.submit([r.row], ctx?.signal).then(
              () => void accepted++,
              (thrown: unknown) => {
                const err = refusedValue(thrown);
                if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
                reject(r.index, r.serverUrl, err.problem, err.rawMessage);
              },
            ),
          ),
        ).then(() => undefined);
        // Awaited at the next flush or at the end; marked handled so a failure in between is
        // not an unhandled rejection.
        writing.catch(() => {});
      };
      let index = 0;
      for await (const item of reqs) {
        const serverUrl = item.report?.serverUrl ?? '';
        try {
          chunk.push({ row: await prepare(item.report ?? {}, ctx), index, serverUrl });
          if (chunk.length >= STREAM_CHUNK) await flush();
        } catch (thrown) {
          const err = refusedValue(thrown);
          if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
          reject(index, serverUrl, err.problem, err.rawMessage);
        }
        index++;
      }
      await flush();
      await writing;
      rejections.sort((a, b) => a.index - b.index);
      return { accepted, rejected, rejections };
    },
  };
}

export type TelemetryService = ReturnType<typeof createTelemetryService>;
