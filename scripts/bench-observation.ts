// Observation at catalogue scale (issue 23 item 3, docs/observation.md "At catalogue scale"): the
// observation scheduler of 1 or more instances against a loopback fleet of MCP servers
// (scripts/fleet-sim.ts, in its own process), for BENCH_SECONDS. Reports probes per second per
// instance, the time to cover the fleet once, and fairness from the servers' side (what each
// fleet server answered): servers probed a second time before the last one got its first probe,
// and how late each server's next probe came past its interval.
//
//   npx tsx scripts/bench-observation.ts                       # 10,000 servers, PGlite (one instance)
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres INSTANCES=2 npx tsx scripts/bench-observation.ts
//
// Settings (env): FLEET_SERVERS (10000), BENCH_SECONDS (300), OBSERVE_INTERVAL_SECONDS (120),
// OBSERVE_CONCURRENCY (32), OBSERVE_RATE_PER_MINUTE (100000), FLEET_LATENCY_MS (20),
// FLEET_JITTER_MS (80), FLEET_DEAD (0.02), FLEET_FAILURES (0.01), FLEET_CHANGE_SHARE (0.05),
// FLEET_CHANGE_EVERY_MS (60000), INSTANCES (1; >1 needs DATABASE_URL).
// The serving process's V8 settings first, so the service in this process runs as it does in production.
import '../src/runtime-flags.js';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { loadavg } from 'node:os';
import { loadConfig } from '../src/config.js';
import { openPglite } from '../src/db/pglite.js';
import { openPostgres } from '../src/db/postgres.js';
import { migrate } from '../src/db/migrate.js';
import { createScratchDatabase } from '../src/db/scratch.js';
import type { Db } from '../src/db/index.js';
import { createObservatory, type Observatory } from '../src/server.js';
import type { ServerStats } from './fleet-sim.js';

const env = (k: string, d: number) => (process.env[k] ? Number(process.env[k]) : d);
const SERVERS = env('FLEET_SERVERS', 10_000);
const SECONDS = env('BENCH_SECONDS', 300);
const INTERVAL_S = env('OBSERVE_INTERVAL_SECONDS', 120);
const CONCURRENCY = env('OBSERVE_CONCURRENCY', 32);
const RATE = env('OBSERVE_RATE_PER_MINUTE', 100_000);
const INSTANCES = env('INSTANCES', 1);
const load1 = () => Math.round(loadavg()[0]! * 10) / 10;

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

// Probes aborted by stop() can leave a rejection inside the SDK client nobody awaits; counted, not fatal here.
let unhandled = 0;
process.on('unhandledRejection', () => void unhandled++);

async function main() {
  if (INSTANCES > 1 && !process.env.DATABASE_URL) throw new Error('INSTANCES > 1 needs DATABASE_URL (PGlite is one process)');
  const port = await freePort();
  const args = ['--servers', SERVERS, '--port', port, '--latency', env('FLEET_LATENCY_MS', 20), '--jitter', env('FLEET_JITTER_MS', 80), '--dead', env('FLEET_DEAD', 0.02), '--failures', env('FLEET_FAILURES', 0.01), '--change-share', env('FLEET_CHANGE_SHARE', 0.05), '--change-every', env('FLEET_CHANGE_EVERY_MS', 60_000)].map(String);
  const fleetProc = spawn(process.execPath, ['--import', 'tsx', 'scripts/fleet-sim.ts', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    fleetProc.stdout!.once('data', () => resolve());
    fleetProc.once('exit', (c) => reject(new Error(`fleet exited ${c}`)));
  });
  const fleetBase = `http://127.0.0.1:${port}`;
  process.once('exit', () => fleetProc.kill('SIGTERM'));

  let drop = async () => {};
  const dbs: Db[] = [];
  if (process.env.DATABASE_URL) {
    const scratch = await createScratchDatabase(process.env.DATABASE_URL, 'bench_obs');
    drop = scratch.drop;
    for (let k = 0; k < INSTANCES; k++) dbs.push(openPostgres(scratch.url, { guard: false }));
    await migrate(dbs[0]!);
  } else {
    const db = await openPglite(null, { guard: false });
    await migrate(db);
    dbs.push(db);
  }
  const config = loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    NODE_ENV: 'production',
    KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64'),
    ALLOW_PRIVATE_TARGETS: '1',
    OBSERVE_ENABLED: '0',
    OBSERVE_INTERVAL_SECONDS: String(INTERVAL_S),
    OBSERVE_CONCURRENCY: String(CONCURRENCY),
    OBSERVE_RATE_PER_MINUTE: String(RATE),
    OBSERVE_TIMEOUT_MS: '10000',
  });
  const instances: Observatory[] = [];
  for (const db of dbs) instances.push(await createObservatory(config, { db, logger: false }));

  const t0 = performance.now();
  const doc = await (await fetch(`${fleetBase}/_fleet/registry`)).json();
  const imported = await instances[0]!.services.catalogue.importDocument(doc);
  const importS = (performance.now() - t0) / 1000;
  process.stdout.write(`fleet: ${SERVERS} servers on ${fleetBase}; imported ${imported.added} in ${importS.toFixed(1)} s; ${INSTANCES} instance(s) on ${dbs[0]!.kind}, interval ${INTERVAL_S} s, concurrency ${CONCURRENCY}, load ${load1()}\n`);

  const startWall = Date.now();
  const loads: number[] = [];
  const errors: string[] = [];
  const perInstance = instances.map(() => 0);
  instances.forEach((o, k) =>
    o.services.observation.start({
      onRound: (s) => {
        perInstance[k]! += s.probed;
      },
    }),
  );
  let coveredAt: number | null = null;
  const deadline = startWall + SECONDS * 1000;
  let stats: ServerStats[] = [];
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5000));
    loads.push(load1());
    stats = ((await (await fetch(`${fleetBase}/_fleet/stats`)).json()) as { stats: ServerStats[] }).stats;
    const answered = stats.filter((s) => s.requests > 0).length;
    const total = stats.reduce((a, s) => a + (s.requests > 0 ? 1 : 0), 0);
    if (coveredAt === null && answered === SERVERS) coveredAt = Date.now();
    process.stdout.write(`  t=${Math.round((Date.now() - startWall) / 1000)} s: ${total} servers reached, ${stats.reduce((a, s) => a + s.lists.length, 0)} manifests read, load ${load1()}\n`);
  }
  await Promise.all(instances.map((o) => o.services.observation.stop()));
  const elapsedS = (Date.now() - startWall) / 1000;
  stats = ((await (await fetch(`${fleetBase}/_fleet/stats`)).json()) as { stats: ServerStats[] }).stats;

  // From the scheduler's own records: every probe, whatever its outcome.
  const rows = await dbs[0]!.query<{ probes: number; last_outcome: string; claimed_by: string; last_latency_ms: number | null; last_detail: string | null }>('SELECT probes, last_outcome, claimed_by, last_latency_ms, last_detail FROM observation_schedule');
  const failures: Record<string, number> = {};
  for (const r of rows) if (r.last_outcome === 'failed' || r.last_outcome === 'timeout') failures[(r.last_detail ?? '').slice(0, 60)] = (failures[(r.last_detail ?? '').slice(0, 60)] ?? 0) + 1;
  const probes = rows.reduce((a, r) => a + r.probes, 0);
  const outcomes: Record<string, number> = {};
  for (const r of rows) outcomes[r.last_outcome ?? 'never'] = (outcomes[r.last_outcome ?? 'never'] ?? 0) + 1;
  const lat = rows.map((r) => r.last_latency_ms).filter((x): x is number => x !== null).sort((a, b) => a - b);
  const pct = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? 0;

  // Fairness from the servers' side. A server "reached" = any request (dead servers answer 503, no manifest).
  // First contact per server approximated by its first tools/list for live servers.
  // First contact = the server's first request of any kind (a probe that failed still reached it).
  const lastFirst = Math.max(...stats.map((s) => s.firstAt ?? Infinity));
  const secondsBeforeLastFirst = stats.filter((s) => s.lists.length >= 2 && s.lists[1]! < lastFirst).length;
  // Exact cover time from the servers' side: the last server's first request.
  if (stats.every((s) => s.firstAt !== null)) coveredAt = Math.max(...stats.map((s) => s.firstAt!));
  const intervalMs = INTERVAL_S * 1000;
  const lateness: number[] = [];
  for (const s of stats) for (let k = 1; k < s.lists.length; k++) lateness.push(s.lists[k]! - s.lists[k - 1]! - intervalMs);
  lateness.sort((a, b) => a - b);
  const lp = (p: number) => (lateness.length ? Math.round(lateness[Math.min(lateness.length - 1, Math.floor(p * lateness.length))]! / 100) / 10 : null);
  const counts = stats.filter((s) => s.lists.length > 0).map((s) => s.lists.length);

  const result = {
    servers: SERVERS,
    instances: INSTANCES,
    backend: dbs[0]!.kind,
    interval_s: INTERVAL_S,
    concurrency: CONCURRENCY,
    elapsed_s: Math.round(elapsedS),
    probes,
    probes_per_s: Math.round((probes / elapsedS) * 10) / 10,
    probes_per_s_per_instance: Math.round((probes / elapsedS / INSTANCES) * 10) / 10,
    by_instance: perInstance,
    cover_once_s: coveredAt === null ? null : Math.round((coveredAt - startWall) / 1000),
    // While every server was due (until the fleet was covered once, or the whole run): the scheduler's throughput.
    cover_rate_per_s: coveredAt === null ? null : Math.round((SERVERS / ((coveredAt - startWall) / 1000)) * 10) / 10,
    second_probe_before_fleet_covered: secondsBeforeLastFirst,
    late_past_interval_s: { p50: lp(0.5), p95: lp(0.95), max: lp(1) },
    manifests_per_live_server: { min: Math.min(...counts), max: Math.max(...counts) },
    outcomes,
    failure_details: Object.fromEntries(Object.entries(failures).sort((a, b) => b[1] - a[1]).slice(0, 5)),
    probe_latency_ms: { p50: pct(0.5), p95: pct(0.95) },
    load_avg: { min: Math.min(...loads), max: Math.max(...loads) },
    errors: errors.length,
    unhandled_rejections_at_stop: unhandled,
  };
  process.stdout.write(JSON.stringify(result, null, 2) + '\n');

  for (const o of instances) await o.close(); // closes its database too
  await drop();
  fleetProc.kill('SIGTERM');
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
