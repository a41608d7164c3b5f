// `npx tsx scripts/bench-profile.ts <report|trust|preflight|leaderboard|gate|gate-rotating|mixed|connect|connect-json|grpc> [seconds]`:
// a CPU profile of the service's main thread while ONE scenario of `npm run bench` runs against
// it (autocannon in a child process, 50 connections; gRPC: h2load, 50 streams on one connection), nothing else. The service runs in this
// process on a scratch PostgreSQL database (DATABASE_URL or the local default), profiled with
// node:inspector from the end of the warm-up to the end of the load; the profile is written to
// bench-profiles/ and summarised (scripts/cpuprofile-top.ts).
// The serving process's V8 settings first, so the service in this process runs as it does in production.
import '../src/runtime-flags.js';
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';
import { toBinary, create } from '@bufbuild/protobuf';
import { encodeEnvelope } from '@connectrpc/connect/protocol';
import { ReportRequestSchema } from '../gen/observatory/v1/telemetry_pb.js';
import { loadConfig } from '../src/config.js';
import { createScratchDatabase } from '../src/db/scratch.js';
import { createObservatory } from '../src/server.js';
import { summarize } from './cpuprofile-top.js';
import type autocannon from 'autocannon';

// `mixed` and `gate-rotating` are driven by this script itself in a child process
// (`--driver <name> <base> <seconds>`): autocannon's command line cannot vary requests, its API can.
if (process.argv[2] === '--driver') {
  const { default: autocannon } = await import('autocannon');
  const driver = process.argv[3];
  let n = 0;
  const srv = (i: number) => `https://bench-${i % 200}.example.com/mcp`;
  const drivers: Record<string, (req: autocannon.Request) => autocannon.Request> = {
    // The mix of `npm run bench`'s mixed row: 70% report, 20% trust, 8% pre-flight, 2% leaderboard.
    mixed: (req) => {
      const i = n++;
      const k = (i * 37) % 100;
      if (k < 70) return { ...req, method: 'POST', path: '/api/report', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ server_url: srv(i), success: i % 9 !== 0, latency_ms: 40 + (i % 50), tool_name: 'search' }) };
      if (k < 90) return { ...req, method: 'GET', path: `/api/trust?url=${encodeURIComponent(srv(i))}`, headers: {}, body: undefined };
      if (k < 98) return { ...req, method: 'GET', path: `/v1/preflight?target=${encodeURIComponent(srv(i))}`, headers: {}, body: undefined };
      return { ...req, method: 'GET', path: '/api/leaderboard', headers: {}, body: undefined };
    },
    // `npm run bench`'s rotating gate row: the gateway's question for one of the 200 upstreams.
    'gate-rotating': (req) => ({ ...req, method: 'GET', path: '/v1/gate', headers: { 'x-mcp-server': srv(n++) }, body: undefined }),
  };
  const setupRequest = drivers[driver ?? ''];
  if (!setupRequest) throw new Error(`unknown driver ${driver}`);
  const result = await autocannon({ url: process.argv[4]!, connections: 50, duration: Number(process.argv[5]), requests: [{ setupRequest }] });
  process.stdout.write(autocannon.printResult(result));
  process.exit(0);
}

const scenario = process.argv[2] ?? 'trust';
const seconds = Number(process.argv[3] ?? 10);
const SERVERS = 200;
const serverUrl = (i: number) => `https://bench-${i}.example.com/mcp`;

/** Drives the service for `seconds`: autocannon (HTTP/1.1), or h2load for scenarios starting with 'h2load' (gRPC over HTTP/2). */
function drive(seconds: number, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child =
      args[0] === 'h2load'
        ? spawn('h2load', ['-c', '1', '-m', '50', '-D', String(seconds), ...args.slice(1)], { stdio: ['ignore', 'pipe', 'pipe'] })
        : args[0] === '--driver'
          ? spawn(process.execPath, ['--import', 'tsx', 'scripts/bench-profile.ts', '--driver', args[1]!, args[2]!, String(seconds)], { stdio: ['ignore', 'pipe', 'pipe'] })
          : spawn(process.execPath, ['node_modules/autocannon/autocannon.js', '-c', '50', '-d', String(seconds), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(out))));
  });
}

const scratch = await createScratchDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres', 'obs_profile');
// Production settings (no development-only transaction guard; keys sealed under a secret of this run).
const config = loadConfig({ PORT: '18194', HOST: '127.0.0.1', LOG_LEVEL: 'warn', DATABASE_URL: scratch.url, RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0', RATE_LIMIT_GATE_PER_MINUTE: '0', NEW_SERVERS_PER_SOURCE_PER_HOUR: '0', OBSERVE_ENABLED: '0', NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') });
const obs = await createObservatory(config, { logger: false });
try {
  const base = await obs.listen();
  for (let i = 0; i < SERVERS * 5; i++) {
    const res = await fetch(`${base}/api/report`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ server_url: serverUrl(i % SERVERS), success: i % 7 !== 0, latency_ms: 50 + (i % 90), tool_name: 'search' }),
    });
    if (!res.ok) throw new Error(`seeding: ${res.status}`);
  }
  // A binary body cannot travel as a command-line argument: autocannon reads it from a file.
  const msg = toBinary(ReportRequestSchema, create(ReportRequestSchema, { serverUrl: serverUrl(1), success: true, latencyMs: 42 }));
  const bodyFile = join(mkdtempSync(join(tmpdir(), 'obs-profile-')), 'report.bin');
  writeFileSync(bodyFile, msg);
  // The same message as one gRPC length-prefixed message (flags 0: uncompressed), framed by connect's own encoder.
  const grpcFile = join(bodyFile, '..', 'report.grpc');
  writeFileSync(grpcFile, encodeEnvelope(0, msg));
  // autocannon's [<id>] placeholder does not exist; rotate with a few fixed URLs instead.
  const args: Record<string, string[]> = {
    report: ['-m', 'POST', '-H', 'content-type=application/json', '-b', JSON.stringify({ server_url: serverUrl(3), success: true, latency_ms: 42, tool_name: 'search' }), `${base}/api/report`],
    trust: [`${base}/api/trust?url=${encodeURIComponent(serverUrl(3))}`],
    preflight: [`${base}/v1/preflight?target=${encodeURIComponent(serverUrl(3))}`],
    leaderboard: [`${base}/api/leaderboard`],
    mixed: ['--driver', 'mixed', base],
    'gate-rotating': ['--driver', 'gate-rotating', base],
    grpc: ['h2load', '-H', 'content-type: application/grpc', '-H', 'te: trailers', '--data', grpcFile, `${base}/observatory.v1.TelemetryService/Report`],
    gate: ['-H', `x-mcp-server=${serverUrl(3)}`, `${base}/v1/gate`],
    'connect-json': ['-m', 'POST', '-H', 'content-type=application/json', '-b', JSON.stringify({ serverUrl: serverUrl(3), success: true, latencyMs: 42 }), `${base}/observatory.v1.TelemetryService/Report`],
    connect: [
      '-m',
      'POST',
      '-H',
      'content-type=application/proto',
      '-i',
      bodyFile,
      `${base}/observatory.v1.TelemetryService/Report`,
    ],
  };
  if (!args[scenario]) throw new Error(`unknown scenario ${scenario}; one of ${Object.keys(args).join(', ')}`);
  await drive(3, args[scenario]!); // warm-up (JIT, pools)
  // --no-profile: CPU per request only, without the profiler's sampling (for A/B comparisons).
  const profiling = !process.argv.includes('--no-profile');
  const session = new Session();
  if (profiling) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 200 });
    await session.post('Profiler.start');
  }
  const cpu0 = process.cpuUsage();
  const out = await drive(seconds, args[scenario]!);
  const cpu = process.cpuUsage(cpu0);
  const served = Number((/(\d+)k? requests in/.exec(out) ?? /requests: \d+ total, \d+ started, (\d+) done/.exec(out))?.[1] ?? NaN) * (/\dk requests in/.test(out) ? 1000 : 1);
  if (!profiling) {
    console.log(`service CPU: ${Math.round((cpu.user + cpu.system) / 1000)} ms user+system for ~${served} requests = ${((cpu.user + cpu.system) / served).toFixed(1)} µs per request (no profiler)`);
    console.log(out.split('\n').filter((l) => /requests in|^│ (Latency|Req)/.test(l)).join('\n'));
  } else {
    const { profile } = await session.post('Profiler.stop');
    session.disconnect();
    mkdirSync('bench-profiles', { recursive: true });
    const file = `bench-profiles/${scenario}-${Date.now()}.cpuprofile`;
    writeFileSync(file, JSON.stringify(profile));
    // CPU time of this process (the service; autocannon runs in a child) per request: unlike
    // requests/s it hardly moves with what else the machine runs. Includes the profiler's sampling.
    console.log(`service CPU: ${Math.round((cpu.user + cpu.system) / 1000)} ms user+system for ~${served} requests = ${((cpu.user + cpu.system) / served).toFixed(1)} µs per request (profiler on)`);
    console.log(out.split('\n').filter((l) => /Req\/Sec|Latency|requests in|non 2xx|finished in|requests: |status codes/i.test(l) || /^│ (Latency|Req)/.test(l)).join('\n'));
    console.log(summarize(file, 40));
  }
} finally {
  await obs.close();
  await scratch.drop();
}
