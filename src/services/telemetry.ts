import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ReportRequest, ReportResponseSchema, ReportStreamRequest, ReportStreamResponseSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { classifyCategory } from '../domain/category.js';
import { canonicalServerUrl, InvalidServerUrl, serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { validateReport } from '../domain/telemetry.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { serverStore } from '../store/servers.js';
import { telemetryStore, type IngestRow, type TelemetryReport } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { reportSourceResolver } from './report-source.js';

/** Reports of one client stream stored per transaction. */
export const STREAM_BATCH = 500;

/** TelemetryService: THE implementation of POST /api/report and its RPCs. */
export function createTelemetryService({ db, now }: ServiceDeps) {
  const servers = serverStore(db);
  const telemetry = telemetryStore(db);
  const sourceOf = reportSourceResolver(db);

  /** Validates one report and resolves its server (created on first report); nothing is stored yet. */
  async function prepare(input: Partial<ReportRequest>, at: Date, known?: Map<string, number>): Promise<{ serverId: number; report: TelemetryReport }> {
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
    const toolName = input.toolName ?? null;
    const report = { server_url: url, success: input.success!, latency_ms: input.latencyMs!, tool_name: toolName, http_status: input.httpStatus ?? null };
    // Within one stream, a server already resolved needs no lookup unless a tool name may refine it.
    const cachedId = toolName ? undefined : known?.get(url);
    if (cachedId !== undefined) return { serverId: cachedId, report };
    const name = serverNameFromUrl(url);
    const server = await servers.ensure({ url, name, slug: slugify(name), category: classifyCategory([name, toolName ?? '']) }, at);
    // Reported tool names refine a category the URL alone could not tell.
    if (server.category === 'general' && toolName) {
      const refined = classifyCategory([server.name, toolName]);
      if (refined !== 'general') await servers.setCategory(server.id, refined);
    }
    known?.set(url, server.id);
    return { serverId: server.id, report };
  }

  async function record(input: Partial<ReportRequest>, ctx: CallContext | undefined): Promise<string> {
    const at = now();
    const { serverId, report } = await prepare(input, at);
    await telemetry.insert(serverId, report, at, await sourceOf(ctx, at));
    return report.server_url;
  }

  return {
    async report(req: Partial<ReportRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportResponseSchema>> {
      const serverUrl = await record(req, ctx);
      return { recorded: true, serverUrl };
    },

    /**
     * Client stream of reports from one caller (one source). Valid reports are stored in batches
     * of STREAM_BATCH, each batch in one transaction; `accepted` counts committed reports.
     */
    async reportStream(reqs: AsyncIterable<ReportStreamRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportStreamResponseSchema>> {
      let accepted = 0;
      let rejected = 0;
      const rejections: { index: number; serverUrl: string; code: string; detail: string }[] = [];
      let index = 0;
      let batch: IngestRow[] = [];
      const known = new Map<string, number>();
      let sourceDay = '';
      let sourceKey = '';
      const flush = async () => {
        if (batch.length === 0) return;
        await telemetry.insertMany(batch);
        accepted += batch.length;
        batch = [];
      };
      for await (const item of reqs) {
        try {
          const at = now();
          const { serverId, report } = await prepare(item.report ?? {}, at, known);
          const day = at.toISOString().slice(0, 10);
          // One caller, one source; its address hash changes with the UTC day.
          if (sourceDay !== day) [sourceDay, sourceKey] = [day, await sourceOf(ctx, at)];
          batch.push({ serverId, report, at, source: sourceKey });
          if (batch.length >= STREAM_BATCH) await flush();
        } catch (err) {
          if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
          rejected++;
          if (rejections.length < 100) rejections.push({ index, serverUrl: item.report?.serverUrl ?? '', code: err.problem, detail: err.rawMessage });
        }
        index++;
      }
      await flush();
      return { accepted, rejected, rejections };
    },
  };
}

export type TelemetryService = ReturnType<typeof createTelemetryService>;
