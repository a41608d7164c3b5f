// `npm run bench:trust`: measures a trust lookup on servers with 100, 100,000 and 1,000,000
// reports, each spread over 30 days from 10 sources (docs/performance.md). Uses a fresh in-memory PGlite, or DATABASE_URL when set
// (then it creates and drops a scratch database). Reports go through the ingestion store.
// The serving process's V8 settings first, so the service in this process runs as it does in production.
import '../src/runtime-flags.js';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/config.js';
import { createTestDatabase } from '../test/support/db.js';
import { createObservatory } from '../src/server.js';
import { serverStore } from '../src/store/servers.js';
import { telemetryStore, type IngestRow } from '../src/store/telemetry.js';

const HOUR = 3_600_000;
const BIG = Number(process.env.BENCH_REPORTS ?? 1_000_000);

async function main() {
  // Measured as in production: without the development-only transaction guard (src/db/transaction-guard.ts).
  process.env.NODE_ENV = 'production';
  const tdb = await createTestDatabase();
  const now = new Date();
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') });
  const obs = await createObservatory(config, { db: tdb.db, logger: false, now: () => now });
  const servers = serverStore(tdb.db);
  const telemetry = telemetryStore(tdb.db);
  const start = now.getTime() - 30 * 24 * HOUR;
  async function load(url: string, count: number, sources: number) {
    const s = await servers.ensure({ url, name: url.slice(8), slug: url.slice(8).replace(/[^a-z0-9]+/g, '-'), category: 'search' }, new Date(start));
    const step = (30 * 24 * HOUR) / count;
    for (let i = 0; i < count; i += 10_000) {
      const rows: IngestRow[] = [];
      for (let j = i; j < Math.min(count, i + 10_000); j++) {
        rows.push({ serverId: s.id, at: new Date(start + j * step), source: `bench:${j % sources}`, report: { server_url: url, success: j % 20 !== 0, latency_ms: 50 + (j % 200), tool_name: null, http_status: 200 } });
      }
      await telemetry.insertMany(rows);
      if (count > 10_000) process.stderr.write(`\rloading ${url}: ${Math.min(count, i + 10_000).toLocaleString('en')} / ${count.toLocaleString('en')}`);
    }
    process.stderr.write('\n');
  }
  const t0 = performance.now();
  await load('https://small.bench.example/mcp', 100, 10);
  await load('https://medium.bench.example/mcp', 100_000, 10);
  await load('https://big.bench.example/mcp', BIG, 10);
  const loadS = (performance.now() - t0) / 1000;
  const rawRows = (await tdb.db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM telemetry'))[0]!.n;

  async function measure(url: string) {
    for (let i = 0; i < 20; i++) await obs.services.trust.getTrust({ url }); // warm-up
    const times: number[] = [];
    for (let i = 0; i < 200; i++) {
      const a = performance.now();
      await obs.services.trust.getTrust({ url });
      times.push(performance.now() - a);
    }
    times.sort((a, b) => a - b);
    return { median: times[100]!.toFixed(2), p95: times[190]!.toFixed(2) };
  }
  const small = await measure('https://small.bench.example/mcp');
  const medium = await measure('https://medium.bench.example/mcp');
  const big = await measure('https://big.bench.example/mcp');
  console.log(`backend ${tdb.db.kind}; ${rawRows.toLocaleString('en')} raw reports stored; loaded in ${loadS.toFixed(0)} s`);
  console.log(`getTrust, server with 100 reports:        median ${small.median} ms, p95 ${small.p95} ms`);
  console.log(`getTrust, server with 100,000 reports:    median ${medium.median} ms, p95 ${medium.p95} ms`);
  console.log(`getTrust, server with ${BIG.toLocaleString('en')} reports: median ${big.median} ms, p95 ${big.p95} ms`);
  await obs.close();
  await tdb.drop().catch(() => {});
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
