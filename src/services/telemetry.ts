import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ReportRequest, ReportResponseSchema, ReportStreamRequest, ReportStreamResponseSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { classifyCategory } from '../domain/category.js';
import { canonicalServerUrl, InvalidServerUrl, serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { validateReport } from '../domain/telemetry.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { serverStore } from '../store/servers.js';
import { telemetryStore } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';
import { reportSourceResolver } from './report-source.js';

/** TelemetryService: THE implementation of POST /api/report and its RPCs. */
export function createTelemetryService({ db, now }: ServiceDeps) {
  const servers = serverStore(db);
  const telemetry = telemetryStore(db);
  const sourceOf = reportSourceResolver(db);

  async function record(input: Partial<ReportRequest>, ctx: CallContext | undefined): Promise<string> {
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
    const name = serverNameFromUrl(url);
    const server = await servers.ensure({ url, name, slug: slugify(name), category: classifyCategory([name, toolName ?? '']) }, at);
    // Reported tool names refine a category the URL alone could not tell.
    if (server.category === 'general' && toolName) {
      const refined = classifyCategory([server.name, toolName]);
      if (refined !== 'general') await servers.setCategory(server.id, refined);
    }
    await telemetry.insert(
      server.id,
      { server_url: url, success: input.success!, latency_ms: input.latencyMs!, tool_name: toolName, http_status: input.httpStatus ?? null },
      at,
      await sourceOf(ctx, at),
    );
    return url;
  }

  return {
    async report(req: Partial<ReportRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportResponseSchema>> {
      const serverUrl = await record(req, ctx);
      return { recorded: true, serverUrl };
    },

    async reportStream(reqs: AsyncIterable<ReportStreamRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof ReportStreamResponseSchema>> {
      let accepted = 0;
      let rejected = 0;
      const rejections: { index: number; serverUrl: string; code: string; detail: string }[] = [];
      let index = 0;
      for await (const item of reqs) {
        try {
          await record(item.report ?? {}, ctx);
          accepted++;
        } catch (err) {
          if (!(err instanceof ObservatoryError) || err.status >= 500) throw err;
          rejected++;
          if (rejections.length < 100) rejections.push({ index, serverUrl: item.report?.serverUrl ?? '', code: err.problem, detail: err.rawMessage });
        }
        index++;
      }
      return { accepted, rejected, rejections };
    },
  };
}

export type TelemetryService = ReturnType<typeof createTelemetryService>;
