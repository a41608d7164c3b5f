import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ReportRequest, ReportResponseSchema, ReportStreamRequest, ReportStreamResponseSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { classifyCategory } from '../domain/category.js';
import { canonicalServerUrl, InvalidServerUrl, serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { OBSERVATORY_SOURCE } from '../domain/scoring.js';
import { validateReport } from '../domain/telemetry.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { INGEST_MAX_BATCH, ingestBatcher } from '../store/ingest-batcher.js';
import { serverCache } from '../store/server-cache.js';
import type { IngestRow } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { reportSourceResolver } from './report-source.js';

/** Reports of one stream written per group-commit submission. */
const STREAM_CHUNK = 500;

/** TelemetryService: THE implementation of POST /api/report and its RPCs. */
export function createTelemetryService({ db, now, observe }: ServiceDeps) {
  const servers = serverCache(db);
  const ingest = ingestBatcher(db, { onBatch: observe?.ingestBatch });
  const sourceOf = reportSourceResolver(db);

  /**
   * Validates one report and resolves its server; the row is not written yet. `source` may be
   * given when the caller resolved it once for many reports of one request.
   */
  async function prepare(input: Partial<ReportRequest>, ctx: CallContext | undefined, source?: string): Promise<IngestRow> {
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
    const server = await servers.ensure(
      url,
      () => {
        const name = serverNameFromUrl(url);
        return { name, slug: slugify(name), category: classifyCategory([name, toolName ?? '']) };
      },
      at,
    );
    // Reported tool names refine a category the URL alone could not tell.
    if (server.category === 'general' && toolName) {
      const refined = classifyCategory([server.name, toolName]);
      if (refined !== 'general') await servers.setCategory(server, refined);
    }
    return {
      serverId: server.id,
      report: { server_url: url, success: input.success!, latency_ms: input.latencyMs!, tool_name: toolName, http_status: input.httpStatus ?? null },
      at,
      source: source ?? (await sourceOf(ctx, at)),
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
      for (const input of inputs) {
        try {
          rows.push(await prepare(input, ctx, source));
          ok.push(true);
        } catch (err) {
          if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
          ok.push(false);
        }
      }
      const chunks: Promise<void>[] = [];
      for (let i = 0; i < rows.length; i += INGEST_MAX_BATCH) chunks.push(ingest.submit(rows.slice(i, i + INGEST_MAX_BATCH)));
      await Promise.all(chunks);
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
