import { Code } from '@connectrpc/connect';
import type { DescMessage, MessageInitShape } from '@bufbuild/protobuf';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ExportMetricsServiceResponseSchema } from '../../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceResponseSchema } from '../../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { OtlpExportRefused, type OtlpExportBytes } from '../../domain/otlp-export.js';
import { PROBLEMS } from '../../errors.js';
import { callContext, type CallContext } from '../../services/context.js';
import { CONTENT_TYPE, decompress, encodeMessage, encodeStatus, OTLP_HTTP_PATHS, OtlpHttpError, otlpEncoding, type OtlpEncoding } from '../otlp-codec.js';
import { logFailure, problemFromError, type RefusalRouteConfig } from '../problem.js';
import { retryAfterSeconds } from '../rpc-errors.js';
import type { RouteDeps } from '../routes.js';

// OTLP/HTTP receivers on the service's port (docs/telemetry.md): POST /v1/traces and /v1/metrics,
// binary protobuf or OTLP/JSON, optionally gzip. Registered in their own encapsulated context so
// that their body parsers (raw bytes, up to OTLP_MAX_EXPORT_BYTES) and their error answers
// (a google.rpc.Status in the request's encoding, as OTLP requires, instead of problem+json)
// apply to these two routes only.

const GRPC_CODE_BY_STATUS: Record<number, Code> = { 400: Code.InvalidArgument, 413: Code.ResourceExhausted, 415: Code.InvalidArgument, 429: Code.ResourceExhausted, 503: Code.Unavailable };

function sendStatus(reply: FastifyReply, status: number, message: string, encoding: OtlpEncoding, headers: Record<string, string> = {}) {
  const retryAfter = retryAfterSeconds(Object.entries(headers).find(([k]) => k.toLowerCase() === 'retry-after')?.[1]);
  return reply
    .code(status)
    .headers(headers)
    .type(CONTENT_TYPE[encoding])
    .send(encodeStatus(GRPC_CODE_BY_STATUS[status] ?? (status >= 500 ? Code.Internal : Code.InvalidArgument), message, encoding, retryAfter));
}

/**
 * Refusals made before the handler (the request body budget, a draining process: src/http/problem.ts
 * sendProblemToCaller) are a google.rpc.Status in the request's encoding too, with their status
 * and Retry-After, as OTLP/HTTP wants.
 */
const config: RefusalRouteConfig = {
  sendRefusal: (req, reply, code, detail, headers) => sendStatus(reply, PROBLEMS[code].status, detail, otlpEncoding(req.headers['content-type']) ?? 'protobuf', headers),
};

export function otlpRoutes(app: FastifyInstance, { services }: RouteDeps) {
  const limit = services.otlp.maxExportBytes;

  function route<Res extends DescMessage>(path: string, resSchema: Res, handle: (input: OtlpExportBytes, ctx: CallContext) => Promise<MessageInitShape<Res>>) {
    return [
      path,
      { bodyLimit: limit, config },
      async (req: FastifyRequest, reply: FastifyReply) => {
        const encoding = otlpEncoding(req.headers['content-type']);
        if (encoding === null) throw new OtlpHttpError(415, 'send OTLP as application/x-protobuf or application/json');
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const body = await decompress(raw, req.headers['content-encoding'] as string | undefined, limit);
        // The service measures the export before decoding it, then decodes it a piece at a time
        // (docs/telemetry.md "What an export may cost"). With reply.raw, an export whose client
        // leaves before its rows' write begins is not written.
        const res = await handle({ bytes: body, format: encoding === 'protobuf' ? 'protobuf' : 'otlp-json' }, callContext(req.headers, req.ip, reply.raw));
        return reply.type(CONTENT_TYPE[encoding]).send(encodeMessage(resSchema, res, encoding));
      },
    ] as const;
  }

  void app.register(async (otlp) => {
    // Only OTLP's two media types reach the handlers, as raw bytes (decompressed and decoded there).
    otlp.removeAllContentTypeParsers();
    otlp.addContentTypeParser(['application/x-protobuf', 'application/json'], { parseAs: 'buffer', bodyLimit: limit }, (_req, body, done) => done(null, body));
    otlp.setErrorHandler((err: FastifyError | Error, req, reply) => {
      const encoding = otlpEncoding(req.headers['content-type']) ?? 'protobuf';
      if (err instanceof OtlpHttpError) return sendStatus(reply, err.status, err.message, encoding);
      // Not a valid export (400), or one that holds too much to decode (413, as one too large).
      if (err instanceof OtlpExportRefused) return sendStatus(reply, err.reason === 'too_large' ? 413 : 400, err.message, encoding);
      const fe = err as FastifyError;
      if (fe.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return sendStatus(reply, 413, `the export is larger than ${limit} bytes`, encoding);
      if (fe.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return sendStatus(reply, 415, 'send OTLP as application/x-protobuf or application/json', encoding);
      // Everything else as everywhere (src/http/problem.ts): our errors keep their status (a lost
      // database is 503 + Retry-After, which OTLP senders retry), the rest never leak internals.
      const p = problemFromError(err);
      const status = PROBLEMS[p.code].status;
      logFailure(req.log, err, p.code);
      return sendStatus(reply, status, p.detail, encoding, p.headers);
    });
    otlp.post(...route(OTLP_HTTP_PATHS.traces, ExportTraceServiceResponseSchema, (input, ctx) => services.otlp.exportTraces(input, ctx)));
    otlp.post(...route(OTLP_HTTP_PATHS.metrics, ExportMetricsServiceResponseSchema, (input, ctx) => services.otlp.exportMetrics(input, ctx)));
  });
}
