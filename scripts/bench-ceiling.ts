// The ceiling for `npm run bench`: a bare fastify doing the same HTTP work as the service with no
// logic. POST /api/report validates the very same JSON schema and answers 200; GET /fixed answers
// a small fixed JSON. Run as its own process so it gets its own event loop, like the service.
import Fastify from 'fastify';
import { reportBody } from '../src/http/routes/telemetry.js';

const port = Number(process.env.PORT ?? 18090);
const app = Fastify({ logger: false, ajv: { customOptions: { coerceTypes: false, removeAdditional: true } } });
app.post('/api/report', { schema: { body: reportBody } }, async (req) => ({ recorded: true, server_url: (req.body as { server_url: string }).server_url }));
app.get('/fixed', async () => ({ server: { url: 'https://example.com/mcp', trust_score: 87.5 }, verdict: 'PASS' }));
await app.listen({ port, host: '127.0.0.1' });
process.stdout.write('ready\n');
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
