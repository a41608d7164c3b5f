// `npm run bench:bundle`: the cost of GET /v1/bundle at 100,000 tracked servers (docs/bundles.md
// "Cost"). Servers, cached scores, running totals, 30-day rollups and tool-manifest baselines are
// bulk-inserted with SQL (as the trust engine and the drift probe would have left them), then the
// bundle is built cold, served warm, compressed, and verified. A fresh in-memory PGlite, or
// DATABASE_URL (a scratch database, dropped at the end). BENCH_SERVERS changes the count.
// The serving process's V8 settings first, so the service in this process runs as it does in production.
import '../src/runtime-flags.js';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { request as httpRequest } from 'node:http';
import { loadConfig } from '../src/config.js';
import { createObservatory } from '../src/server.js';
import { keysOfJwks, verifyBundle } from '../src/signing/bundle.js';
import { bundleEntry } from '../src/domain/bundle.js';
import { bundleStore } from '../src/store/bundles.js';
import { createTestDatabase } from '../test/support/db.js';

const N = Number(process.env.BENCH_SERVERS ?? 100_000);
const HOUR = 3_600_000;

function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; bytes: number; ms: number; body: Buffer }> {
  const a = performance.now();
  return new Promise((resolve, reject) => {
    httpRequest(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        resolve({ status: res.statusCode!, bytes: body.length, ms: performance.now() - a, body });
      });
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

async function main() {
  process.env.NODE_ENV = 'production';
  const tdb = await createTestDatabase();
  const db = tdb.db;
  const now = new Date();
  const t0 = performance.now();
  const at = now.toISOString();
  const hour = new Date(Math.floor(now.getTime() / HOUR) * HOUR - HOUR).toISOString();
  // Every 10th server has no reports (UNRATED), one in 50 a drifted manifest, one in 3 a baseline.
  await db.exec(`
    INSERT INTO servers (url, name, slug, category, registered_at)
      SELECT 'https://s' || i || '.bench.example/mcp', 's' || i || '.bench.example/mcp', 's' || i || '-bench-example-mcp',
             (ARRAY['weather','finance','search','code','data','general'])[1 + i % 6], '${at}'::timestamptz - interval '40 days'
        FROM generate_series(1, ${N}) i;
    INSERT INTO server_totals (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
      SELECT id, 20 + id % 500, (20 + id % 500) * (id % 100) / 100, (20 + id % 500) * 120.0, 0, ARRAY[]::bigint[], '${at}'::timestamptz - interval '30 days', '${at}'::timestamptz - (id % 3600) * interval '1 second'
        FROM servers WHERE id % 10 <> 0;
    INSERT INTO telemetry_hourly (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
      SELECT id, '${hour}', 'bench', 20 + id % 500, (20 + id % 500) * (id % 100) / 100, (20 + id % 500) * 120.0, 0, ARRAY[]::bigint[] FROM servers WHERE id % 10 <> 0;
    INSERT INTO server_scores (server_id, trust_score, verdict, anomaly_flags, evidence_reports, computed_at)
      SELECT s.id, (s.id % 1000) / 10.0,
             CASE WHEN t.n IS NULL THEN 'UNRATED' WHEN (s.id % 1000) >= 600 THEN 'PASS' WHEN (s.id % 1000) >= 400 THEN 'UNCERTAIN' ELSE 'FAIL' END,
             CASE WHEN s.id % 97 = 0 THEN ARRAY['latency_spike'] ELSE ARRAY[]::text[] END, coalesce(t.n, 0), '${at}'
        FROM servers s LEFT JOIN server_totals t ON t.server_id = s.id;
    INSERT INTO drift_baselines (baseline_id, server_id, recorded_at, manifest_hash, tool_count, tools, previous_baseline_id, drift_detected, changes, receipt_id)
      SELECT 'b' || id, id, '${at}'::timestamptz - interval '1 day', md5(id::text) || md5((id * 7)::text), 3, '[]'::jsonb, NULL, id % 50 = 0, '{}'::jsonb, substr(md5(id::text), 1, 16)
        FROM servers WHERE id % 3 = 0;
  `);
  const loadS = (performance.now() - t0) / 1000;
  await db.exec('ANALYZE');
  // The one statement a build runs, alone (twice: the second with a warm cache).
  let qa = performance.now();
  await bundleStore(db).rows(new Date(now.getTime() - 30 * 86_400_000));
  const queryCold = performance.now() - qa;
  qa = performance.now();
  const rows = await bundleStore(db).rows(new Date(now.getTime() - 30 * 86_400_000));
  const queryWarm = performance.now() - qa;
  qa = performance.now();
  const entries = rows.map((r) => bundleEntry(r, now, 7 * 86_400_000));
  const json = JSON.stringify({ servers: entries });
  Buffer.from(json).toString('base64url');
  const encodeMs = performance.now() - qa;

  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64'), BUNDLE_CACHE_SECONDS: '3600', RATE_LIMIT_BUNDLE_PER_MINUTE: '0' });
  const obs = await createObservatory(config, { db, logger: false });
  const address = await obs.listen();
  const base = `http://127.0.0.1:${new URL(address).port}`;
  const rss0 = process.memoryUsage().rss;

  const cold = await get(`${base}/v1/bundle`);
  if (cold.status !== 200) throw new Error(`GET /v1/bundle answered ${cold.status}: ${cold.body.toString('utf8').slice(0, 300)}`);
  const rssBuilt = process.memoryUsage().rss;
  const warm: number[] = [];
  for (let i = 0; i < 5; i++) warm.push((await get(`${base}/v1/bundle`)).ms);
  const gzipFirst = await get(`${base}/v1/bundle`, { 'accept-encoding': 'gzip' });
  const gzipWarm = await get(`${base}/v1/bundle`, { 'accept-encoding': 'gzip' });
  const brFirst = await get(`${base}/v1/bundle`, { 'accept-encoding': 'br' });
  const brWarm = await get(`${base}/v1/bundle`, { 'accept-encoding': 'br' });
  const file = JSON.parse(cold.body.toString('utf8'));
  const etag = `"${JSON.parse(Buffer.from(file.jws.split('.')[1], 'base64url').toString()).jti}"`;
  const notModified = await get(`${base}/v1/bundle`, { 'if-none-match': etag });
  const filtered = await get(`${base}/v1/bundle?verdict=FAIL`);
  const va = performance.now();
  const v = await verifyBundle(file.jws, keysOfJwks(file.jwks) as Map<string, never>, new Date());
  const verifyMs = performance.now() - va;
  if (!v.valid) throw new Error(`bundle does not verify: ${v.reason}`);
  warm.sort((a, b) => a - b);
  const mb = (b: number) => `${(b / 1e6).toFixed(1)} MB`;
  console.log(`backend ${db.kind}; ${N.toLocaleString('en')} servers bulk-inserted in ${loadS.toFixed(1)} s; machine shared with other jobs (loaded)`);
  console.log(`the bundle's one SQL statement alone: ${queryCold.toFixed(0)} ms (first), ${queryWarm.toFixed(0)} ms (again), ${rows.length.toLocaleString('en')} rows`);
  console.log(`entries + JSON + base64url of the payload alone: ${encodeMs.toFixed(0)} ms`);
  console.log(`cold build (score read + entries + sign + store the state), served identity: ${cold.ms.toFixed(0)} ms, ${mb(cold.bytes)}`);
  console.log(`warm (cached build), identity: median ${warm[2]!.toFixed(0)} ms`);
  console.log(`gzip: first ${gzipFirst.ms.toFixed(0)} ms (compresses), then ${gzipWarm.ms.toFixed(0)} ms; ${mb(gzipWarm.bytes)}`);
  console.log(`br (quality 5): first ${brFirst.ms.toFixed(0)} ms (compresses), then ${brWarm.ms.toFixed(0)} ms; ${mb(brWarm.bytes)}`);
  console.log(`If-None-Match: ${notModified.status} in ${notModified.ms.toFixed(1)} ms`);
  console.log(`?verdict=FAIL (a second filter set, cold): ${filtered.ms.toFixed(0)} ms, ${mb(filtered.bytes)}`);
  console.log(`offline verification (signature + claims, node:crypto): ${verifyMs.toFixed(0)} ms`);
  console.log(`process RSS: ${mb(rss0)} before, ${mb(rssBuilt)} after the first build`);
  // The database is the scratch one: closed and dropped by tdb.drop, after the app stops.
  await obs.app.close();
  await obs.services.close();
  await tdb.drop();
  process.exit(0);
}

await main();
