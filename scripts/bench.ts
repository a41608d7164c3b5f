// `npm run bench`: measures the hot paths side by side with the ceiling of this stack.
//
// The service and a bare-fastify ceiling each run as their own child process; this process is
// the load generator (autocannon, 50 connections). Storage is a fresh database on the local
// PostgreSQL (DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres), or PGlite with --pglite.
// Results are printed and written to docs/performance.md between the BENCH markers.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { toBinary, create } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ReportRequestSchema, TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';

const args = new Set(process.argv.slice(2));
const usePglite = args.has('--pglite');
const DURATION = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = 50;
const SERVERS = 200;
const SVC_PORT = 18181;
const CEIL_PORT = 18182;
const write = !args.has('--no-write');

function startChild(script: string, env: Record<string, string>): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
    const deadline = setTimeout(() => reject(new Error(`${script} did not start`)), 60_000);
    const poll = async () => {
      const port = env.PORT;
      const ok = await fetch(`http://127.0.0.1:${port}${script.includes('ceiling') ? '/fixed' : '/readyz'}`).then((r) => r.ok, () => false);
      if (ok) {
        clearTimeout(deadline);
        child.removeAllListeners('exit');
        resolve(child);
      } else setTimeout(poll, 200);
    };
    void poll();
  });
}

async function freshPostgres(): Promise<{ url: string; drop: () => Promise<void> }> {
  const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `obs_bench_${Date.now()}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(base);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const a = new pg.Client({ connectionString: base });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}

interface Row {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  ceiling?: string;
  ratio?: number;
  errors: number;
}

async function load(opts: autocannon.Options): Promise<autocannon.Result> {
  return autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
}

function row(name: string, r: autocannon.Result, ceiling?: { name: string; r: autocannon.Result }): Row {
  const bad = r.non2xx + r.errors + r.timeouts;
  return {
    name,
    rps: Math.round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    errors: bad,
    ...(ceiling ? { ceiling: ceiling.name, ratio: r.requests.average / ceiling.r.requests.average } : {}),
  };
}

const serverUrl = (i: number) => `https://bench-${i}.example.com/mcp`;

async function main() {
  const db = usePglite ? null : await freshPostgres();
  const dataDir = usePglite ? mkdtempSync(join(tmpdir(), 'obs-bench-')) : null;
  const svcEnv: Record<string, string> = { PORT: String(SVC_PORT), HOST: '127.0.0.1', LOG_LEVEL: 'warn' };
  if (db) svcEnv.DATABASE_URL = db.url;
  else {
    svcEnv.DATA_DIR = dataDir!;
    delete process.env.DATABASE_URL;
  }
  const svc = await startChild('src/main.ts', svcEnv);
  const ceil = await startChild('scripts/bench-ceiling.ts', { PORT: String(CEIL_PORT) });
  const S = `http://127.0.0.1:${SVC_PORT}`;
  const C = `http://127.0.0.1:${CEIL_PORT}`;
  const rows: Row[] = [];
  try {
    process.stderr.write(`seeding ${SERVERS} servers...\n`);
    const seed = await load({
      url: `${S}/api/report`,
      amount: SERVERS * 20,
      duration: 600,
      requests: [
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          setupRequest: (req, ctx: object) => {
            const c = ctx as { i?: number };
            const i = (c.i = (c.i ?? 0) + 1);
            return { ...req, body: JSON.stringify({ server_url: serverUrl(i % SERVERS), success: i % 7 !== 0, latency_ms: 50 + (i % 90), tool_name: 'search' }) };
          },
        },
      ],
    });
    if (seed.non2xx) throw new Error(`seeding failed: ${seed.non2xx} non-2xx`);

    const reportReq = {
      method: 'POST' as const,
      headers: { 'content-type': 'application/json' },
      setupRequest: (req: autocannon.Request, ctx: object) => {
        const c = ctx as { i?: number };
        const i = (c.i = (c.i ?? 0) + 1);
        return { ...req, body: JSON.stringify({ server_url: serverUrl(i % SERVERS), success: true, latency_ms: 42, tool_name: 'search' }) };
      },
    };
    process.stderr.write('ceiling: bare POST...\n');
    const ceilPost = await load({ url: `${C}/api/report`, requests: [reportReq] });
    process.stderr.write('ceiling: bare GET...\n');
    const ceilGet = await load({ url: `${C}/fixed` });
    const cp = { name: 'bare POST', r: ceilPost };
    const cg = { name: 'bare GET', r: ceilGet };
    rows.push(row('ceiling: bare POST (same schema)', ceilPost), row('ceiling: bare GET (fixed JSON)', ceilGet));

    process.stderr.write('POST /api/report...\n');
    rows.push(row('POST /api/report', await load({ url: `${S}/api/report`, requests: [reportReq] }), cp));

    const rotating = (path: (i: number) => string) => [
      {
        method: 'GET' as const,
        setupRequest: (req: autocannon.Request, ctx: object) => {
          const c = ctx as { i?: number };
          const i = (c.i = (c.i ?? 0) + 1);
          return { ...req, path: path(i % SERVERS) };
        },
      },
    ];
    process.stderr.write('GET /api/trust...\n');
    rows.push(row('GET /api/trust', await load({ url: S, requests: rotating((i) => `/api/trust?url=${encodeURIComponent(serverUrl(i))}`) }), cg));
    process.stderr.write('GET /v1/preflight...\n');
    rows.push(row('GET /v1/preflight', await load({ url: S, requests: rotating((i) => `/v1/preflight?target=${encodeURIComponent(serverUrl(i))}`) }), cg));
    process.stderr.write('GET /api/leaderboard...\n');
    rows.push(row('GET /api/leaderboard', await load({ url: `${S}/api/leaderboard` }), cg));

    process.stderr.write('Connect Report (binary)...\n');
    const bin = Buffer.from(toBinary(ReportRequestSchema, create(ReportRequestSchema, { serverUrl: serverUrl(1), success: true, latencyMs: 42 })));
    rows.push(
      row(
        'Connect Report (binary, HTTP/1.1)',
        await load({ url: `${S}/observatory.v1.TelemetryService/Report`, method: 'POST', headers: { 'content-type': 'application/proto' }, body: bin }),
        cp,
      ),
    );

    process.stderr.write('gRPC client-streaming bulk ingest...\n');
    const client = createClient(TelemetryService, createGrpcTransport({ baseUrl: S }));
    const PER_STREAM = 5000;
    const STREAMS = 4;
    const t0 = performance.now();
    const results = await Promise.all(
      Array.from({ length: STREAMS }, async (_, s) => {
        async function* gen() {
          for (let i = 0; i < PER_STREAM; i++) yield { report: { serverUrl: serverUrl((s * PER_STREAM + i) % SERVERS), success: true, latencyMs: 40 } };
        }
        return client.reportStream(gen());
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    const accepted = results.reduce((a, r) => a + r.accepted, 0);
    rows.push({ name: `gRPC ReportStream (${STREAMS} streams x ${PER_STREAM})`, rps: Math.round(accepted / secs), p50: NaN, p99: NaN, errors: STREAMS * PER_STREAM - accepted, ceiling: 'bare POST', ratio: accepted / secs / ceilPost.requests.average });
  } finally {
    svc.kill('SIGTERM');
    ceil.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 1000));
    await db?.drop().catch(() => {});
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }

  const header = '| Scenario | req/s | p50 ms | p99 ms | vs ceiling | non-2xx/errors |\n|---|---:|---:|---:|---:|---:|';
  const lines = rows.map(
    (r) => `| ${r.name} | ${r.rps} | ${Number.isNaN(r.p50) ? '-' : r.p50} | ${Number.isNaN(r.p99) ? '-' : r.p99} | ${r.ratio === undefined ? '-' : `${(r.ratio * 100).toFixed(0)}% of ${r.ceiling}`} | ${r.errors} |`,
  );
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const meta = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} cores (${cpu}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, storage: ${usePglite ? 'PGlite' : 'PostgreSQL'}; autocannon, ${CONNECTIONS} connections, ${DURATION} s per scenario, ${SERVERS} seeded servers.`;
  const table = `${meta}\n\n${header}\n${lines.join('\n')}\n`;
  process.stdout.write(`\n${table}`);
  if (write) {
    const file = 'docs/performance.md';
    const marker = usePglite ? 'PGLITE' : 'POSTGRES';
    let doc = '';
    try {
      doc = readFileSync(file, 'utf8');
    } catch {
      doc = '# Performance\n';
    }
    const start = `<!-- BENCH:${marker}:START -->`;
    const end = `<!-- BENCH:${marker}:END -->`;
    const block = `${start}\n${table}${end}`;
    doc = doc.includes(start) ? doc.replace(new RegExp(`${start}[\\s\\S]*?${end}`), block) : `${doc.trimEnd()}\n\n## Latest \`npm run bench\` (${usePglite ? 'PGlite' : 'PostgreSQL'})\n\n${block}\n`;
    writeFileSync(file, doc);
    process.stderr.write(`wrote ${file}\n`);
  }
}

await main();
