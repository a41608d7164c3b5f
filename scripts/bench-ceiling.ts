// The ceiling for `npm run bench`: a bare fastify doing the same HTTP work as the service with no
// logic. POST /api/report validates the very same JSON schema and answers 200; GET /fixed answers
// a small fixed JSON; GET /sized/<n> a fixed JSON of n bytes. On PORT + 1, a bare fastify over
// cleartext HTTP/2 answers a gRPC unary `Report` with a fixed message and grpc-status 0 (the
// HTTP/2 framing, headers and trailers of the service's answer, no logic, no gRPC library): the
// ceiling that separates node's HTTP/2 from the gRPC handler's own cost. Run as its own process
// so it gets its own event loop, like the service.
//
// With CEILING_DATABASE_URL (the bench's scratch database on PostgreSQL), POST /committed/report
// is the bare POST plus the service's own acknowledged write and nothing else: the report's row
// goes through the service's group commit (src/store/ingest-batcher.ts, the same raw INSERT, one
// transaction at a time) and the answer waits for its commit. No validation beyond the schema, no
// canonical URL, no source hash: the ceiling of any service that answers a report only once it is
// stored, on this machine, with this write design (the service's own aggregator folds the rows,
// as it folds its own). /observatory.v1.TelemetryService/Report is the same over Connect.
import Fastify from 'fastify';
import { create, toBinary } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { encodeEnvelope } from '@connectrpc/connect/protocol';
import { ReportResponseSchema, TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { connectPlugin } from '../src/http/connect-adapter.js';
import { reportBody } from '../src/http/routes/telemetry.js';
import { openPostgres } from '../src/db/postgres.js';
import { ingestBatcher } from '../src/store/ingest-batcher.js';
import type { TelemetryReport } from '../src/store/telemetry.js';

const port = Number(process.env.PORT ?? 18090);
const app = Fastify({ logger: false, ajv: { customOptions: { coerceTypes: false, removeAdditional: true } } });
app.post('/api/report', { schema: { body: reportBody } }, async (req) => ({ recorded: true, server_url: (req.body as { server_url: string }).server_url }));
app.get('/fixed', async () => ({ server: { url: 'https://example.com/mcp', trust_score: 87.5 }, verdict: 'PASS' }));
// A fixed JSON answer of exactly n bytes: the ceiling for an answer the size of the service's
// (a trust answer is about 1.2 KB), so that a ratio can separate the service's work from the cost
// of the bytes themselves (socket writes, and the load generator reading them).
const sized = new Map<number, string>();
app.get<{ Params: { n: string } }>('/sized/:n', (req, reply) => {
  const n = Math.min(1 << 20, Math.max(16, Number(req.params.n) || 16));
  let body = sized.get(n);
  if (body === undefined) sized.set(n, (body = JSON.stringify({ pad: 'x'.repeat(n - 10) })));
  reply.type('application/json; charset=utf-8').send(body);
});
const committedUrl = process.env.CEILING_DATABASE_URL;
if (committedUrl) {
  const db = openPostgres(committedUrl, { prepared: true, guard: false });
  const batcher = ingestBatcher(db);
  // Server ids by URL, read from the service's table (the bench seeds the servers through the
  // service before it measures): a URL not yet known is read again, as the service's cache would.
  const ids = new Map<string, number>();
  const idOf = async (url: string): Promise<number | undefined> => {
    let id = ids.get(url);
    if (id === undefined) {
      for (const r of await db.query('SELECT id, url FROM servers')) ids.set(r.url as string, Number(r.id));
      id = ids.get(url);
    }
    return id;
  };
  /** Stores one report through the group commit; false for a server the database does not have. */
  const commit = async (report: TelemetryReport): Promise<boolean> => {
    const serverId = await idOf(report.server_url);
    if (serverId === undefined) return false;
    await batcher.submit([{ serverId, report, at: new Date(), source: 'bench-ceiling' }]);
    return true;
  };
  app.post('/committed/report', { schema: { body: reportBody } }, async (req, reply) => {
    const b = req.body as Partial<TelemetryReport> & { server_url: string; success: boolean; latency_ms: number };
    if (!(await commit({ ...b, tool_name: b.tool_name ?? null, http_status: b.http_status ?? null }))) return reply.code(404).send({ error: 'unknown server' });
    return { recorded: true, server_url: b.server_url };
  });
  // The same for Connect (JSON and binary unary over HTTP/1.1): @connectrpc/connect's router on
  // the service's own adapter (src/http/connect-adapter.ts), no interceptor, and a Report method
  // that only commits the row: the ceiling of the service's Connect door with this library.
  await app.register(connectPlugin, {
    routes: (router) =>
      router.rpc(TelemetryService.method.report, async (req) => {
        const report = { server_url: req.serverUrl, success: req.success ?? false, latency_ms: req.latencyMs ?? 0, tool_name: req.toolName ?? null, http_status: req.httpStatus ?? null };
        if (!(await commit(report))) throw new ConnectError('unknown server', Code.NotFound);
        return create(ReportResponseSchema, { recorded: true, serverUrl: req.serverUrl });
      }),
  });
}
await app.listen({ port, host: '127.0.0.1' });

const h2 = Fastify({ logger: false, http2: true });
h2.addContentTypeParser(/^application\/grpc(\+proto)?$/, { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
// One gRPC length-prefixed message (flags 0: uncompressed), framed by connect's own encoder.
const answer = encodeEnvelope(0, toBinary(ReportResponseSchema, create(ReportResponseSchema, { recorded: true, serverUrl: 'https://bench-5.example.com/mcp' })));
h2.post('/observatory.v1.TelemetryService/Report', (_req, reply) => {
  reply
    .header('content-type', 'application/grpc')
    .trailer('grpc-status', (_reply, _payload, done) => done(null, '0'))
    .send(answer);
});
// PORT=0 (tests): both listeners on free ports, named in the ready line.
await h2.listen({ port: port === 0 ? 0 : port + 1, host: '127.0.0.1' });
const portOf = (a: ReturnType<typeof app.server.address>) => (typeof a === 'object' && a ? a.port : port);
process.stdout.write(`ready http=${portOf(app.server.address())} h2=${portOf(h2.server.address())}\n`);
process.on('SIGTERM', () => void Promise.all([app.close(), h2.close()]).then(() => process.exit(0)));
