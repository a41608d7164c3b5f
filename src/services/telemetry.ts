import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ReportRequest, ReportResponseSchema, ReportStreamRequest, ReportStreamResponseSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { classifyCategory } from '../domain/category.js';
import { slidingWindowDecision } from '../domain/access.js';
import { canonicalServerUrl, InvalidServerUrl, serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { OBSERVATORY_SOURCE } from '../domain/scoring.js';
import { validateReport } from '../domain/telemetry.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { ingestBatcher } from '../store/ingest-batcher.js';
import { serverCache } from '../store/server-cache.js';
import { serverCreationStore } from '../store/server-creations.js';
import { retryOnIdentityConflict, serverStore, type ServerRow } from '../store/servers.js';
import type { IngestRow } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { reportSourceResolver, type ReportSource } from './report-source.js';

/** Reports of one stream written per group-commit submission. */
const STREAM_CHUNK = 500;

/** New servers counted against a source within this window (NEW_SERVERS_PER_SOURCE_PER_HOUR). */
const CREATION_WINDOW_MS = 3_600_000;

/** TelemetryService: THE implementation of POST /api/report and its RPCs. */
export function createTelemetryService({ db, config, now, observe }: ServiceDeps) {
  const servers = serverCache(db);
  const ingest = ingestBatcher(db, { onBatch: observe?.ingestBatch });
  const sourceOf = reportSourceResolver(db);
  const perHour = config.newServersPerSourcePerHour;

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
    return retryOnIdentityConflict(() =>
      db.transaction(async (tx) => {
        const creations = serverCreationStore(tx);
        if (keys.length > 0) {
          await creations.lock(keys[0]!);
          const decision = slidingWindowDecision(await creations.since(keys, new Date(at.getTime() - CREATION_WINDOW_MS)), at, perHour, CREATION_WINDOW_MS);
          if (!decision.allowed) {
            throw new ObservatoryError(
              'rate_limited',
              `at most ${perHour} new servers per hour from one source (a network, or the keys registered from it); ${url} is not tracked yet. Reports on tracked servers are accepted; retry in ${decision.retryAfterSeconds} s`,
              { headers: { 'retry-after': String(decision.retryAfterSeconds) }, extra: { retry_after_seconds: decision.retryAfterSeconds } },
            );
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

  /** Validates one report and resolves its server; the row is not written yet. */
  async function prepare(input: Partial<ReportRequest>, ctx: CallContext | undefined): Promise<IngestRow> {
    const problem = validateReport({
      server_url: input.serverUrl,
      success: input.success,
      latency_ms: input.latencyMs,
      tool_name: input.toolName,
      http_status: input.httpStatus,
    });
    if (problem) throw invalidArgument(problem);
    let url: string;
    try {
      url = canonicalServerUrl(input.serverUrl!);
    } catch (err) {
      if (err instanceof InvalidServerUrl) throw invalidArgument(`server_url: ${err.message}`);
      throw err;
    }
    const at = now();
    const toolName = input.toolName ?? null;
    const source = await sourceOf(ctx, at);
    // The server the URL means: its query is dropped unless a catalogue server has that exact URL.
    const server = await servers.forReport(url, (bare) => createForReport(bare, toolName, source, at));
    // Reported tool names refine a category the URL alone could not tell.
    if (server.category === 'general' && toolName) {
      const refined = classifyCategory([server.name, toolName]);
      if (refined !== 'general') await servers.setCategory(server, refined);
    }
    return {
      serverId: server.id,
      report: { server_url: server.url, success: input.success!, latency_ms: input.latencyMs!, tool_name: toolName, http_status: input.httpStatus ?? null },
      at,
      source: source.id,
    };
  }

  return {
    async report(req: Partial<ReportRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportResponseSchema>> {
      const row = await prepare(req, ctx);
      // Resolves after the group-commit transaction carrying this row committed.
      await ingest.submit([row]);
      return { recorded: true, serverUrl: row.report.server_url };
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
      let index = 0;
      // A stream's reports travel in chunks of up to STREAM_CHUNK rows through the same group
      // commit; the response is sent only after every accepted row committed.
      let chunk: IngestRow[] = [];
      let writing: Promise<void> = Promise.resolve();
      const flush = async () => {
        const rows = chunk;
        chunk = [];
        await writing;
        writing = ingest.submit(rows);
        // Awaited at the next flush or at the end; marked handled so a failure in between is
        // not an unhandled rejection.
        writing.catch(() => {});
      };
      for await (const item of reqs) {
        try {
          chunk.push(await prepare(item.report ?? {}, ctx));
          accepted++;
          if (chunk.length >= STREAM_CHUNK) await flush();
        } catch (err) {
          if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
          rejected++;
          if (rejections.length < 100) rejections.push({ index, serverUrl: item.report?.serverUrl ?? '', code: err.problem, detail: err.rawMessage });
        }
        index++;
      }
      await flush();
      await writing;
      return { accepted, rejected, rejections };
    },
  };
}

export type TelemetryService = ReturnType<typeof createTelemetryService>;
