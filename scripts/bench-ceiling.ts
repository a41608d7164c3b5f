// The ceiling for `npm run bench`: a bare fastify doing the same HTTP work as the service with no
// logic. POST /api/report validates the very same JSON schema and answers 200; GET /fixed answers
// a small fixed JSON; GET /sized/<n> a fixed JSON of n bytes. Run as its own process so it gets its own event loop, like the service.
import Fastify from 'fastify';
import { reportBody } from '../src/http/routes/telemetry.js';

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
await app.listen({ port, host: '127.0.0.1' });
process.stdout.write('ready\n');
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
