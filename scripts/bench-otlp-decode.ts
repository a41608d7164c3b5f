// `npx tsx scripts/bench-otlp-decode.ts [seconds]`: what OTLP exports dense in elements do to the
// event loop (docs/reliability.md "Exports dense in elements"). The service runs in this process on
// a scratch PostgreSQL database (DATABASE_URL or the local default) and measures its own event-loop
// delay (perf_hooks monitorEventLoopDelay); a child process (one client network) sends OTLP/HTTP
// protobuf exports back to back from 4 connections while another reads trust records one after
// another and reports the reads' latency. Three rounds: no exports, the finding's export (3.8 MiB: a resource
// attribute holding 2,000,000 empty AnyValues, one MCP tool call), and a realistic export of as
// many bytes (8,000 spans of 20 attributes, 3.98 MiB). Numbers, not assertions.
// The serving process's V8 settings first, so the service in this process runs as it does in production.
import '../src/runtime-flags.js';
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { create, toBinary } from '@bufbuild/protobuf';
import { ExportTraceServiceRequestSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { loadConfig } from '../src/config.js';
import { createScratchDatabase } from '../src/db/scratch.js';
import { createObservatory } from '../src/server.js';

const SECONDS = Number(process.argv[2] ?? 10);
const SENDERS = 4;

function exportOf(kind: 'dense' | 'realistic'): Uint8Array {
  const now = BigInt(Date.now()) * 1_000_000n;
  const call = {
    traceId: new Uint8Array(16).fill(7),
    spanId: new Uint8Array(8).fill(7),
    name: 'tools/call search',
    kind: 3,
    startTimeUnixNano: now - 20_000_000n,
    endTimeUnixNano: now,
    attributes: [
      { key: 'mcp.method.name', value: { value: { case: 'stringValue' as const, value: 'tools/call' } } },
      { key: 'url.full', value: { value: { case: 'stringValue' as const, value: 'https://bench-otlp.example.com/mcp' } } },
    ],
  };
  if (kind === 'dense') {
    const values = Array.from({ length: 2_000_000 }, () => ({}));
    return toBinary(
      ExportTraceServiceRequestSchema,
      create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: [{ key: 'k', value: { value: { case: 'arrayValue', value: { values } } } }] }, scopeSpans: [{ spans: [call] }] }] }),
    );
  }
  const spans = Array.from({ length: 8000 }, (_, i) => ({
    traceId: new Uint8Array(16).fill(1),
    spanId: new Uint8Array(8).fill(2),
    name: 'tools/call search',
    kind: 3,
    startTimeUnixNano: 1n,
    endTimeUnixNano: 2n,
    attributes: Array.from({ length: 20 }, (_, j) => ({ key: `attr.${j}`, value: { value: { case: 'stringValue' as const, value: `v${i}-${j}` } } })),
  }));
  return toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans: [...spans, call] }] }] }));
}

const pct = (sorted: number[], p: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!);

// The clients, each a process of its own (a sender's writes would delay a reader in the same
// process): `--send <base> <dense|realistic> <seconds>` sends exports back to back from 4
// connections; `--read <base> <seconds>` reads trust records one after another. One JSON line each.
if (process.argv[2] === '--send') {
  const [base, kind, seconds] = [process.argv[3]!, process.argv[4] as 'dense' | 'realistic', Number(process.argv[5])];
  const body = Buffer.from(exportOf(kind));
  const until = Date.now() + seconds * 1000;
  const statuses: Record<string, number> = {};
  await Promise.all(
    Array.from({ length: SENDERS }, async () => {
      while (Date.now() < until) {
        const res = await fetch(`${base}/v1/traces`, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body });
        await res.arrayBuffer();
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      }
    }),
  );
  process.stdout.write(`${JSON.stringify({ bytes: body.length, statuses })}\n`);
  process.exit(0);
}
if (process.argv[2] === '--read') {
  const [base, seconds] = [process.argv[3]!, Number(process.argv[4])];
  const until = Date.now() + seconds * 1000;
  const reads: number[] = [];
  while (Date.now() < until) {
    const t0 = performance.now();
    const res = await fetch(`${base}/api/trust?url=${encodeURIComponent('https://bench-otlp-read.example.com/mcp')}`);
    await res.arrayBuffer();
    reads.push(performance.now() - t0);
  }
  reads.sort((a, b) => a - b);
  process.stdout.write(`${JSON.stringify({ reads: reads.length, readP50: pct(reads, 50), readP99: pct(reads, 99), readMax: reads[reads.length - 1] })}\n`);
  process.exit(0);
}

function child(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    c.stdout.on('data', (d: Buffer) => (text += d.toString()));
    c.on('exit', (code) => (code === 0 ? resolve(JSON.parse(text) as Record<string, unknown>) : reject(new Error(`client exited ${code}`))));
  });
}

const scratch = await createScratchDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres', 'obs_otlp_decode');
const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', DATABASE_URL: scratch.url, OBSERVE_ENABLED: '0', NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') });
const obs = await createObservatory(config, { logger: false });
try {
  const base = await obs.listen();
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  for (const kind of (process.env.ROUNDS?.split(',') ?? ['none', 'dense', 'realistic']) as ('none' | 'dense' | 'realistic')[]) {
    delay.reset();
    const mem0 = process.memoryUsage().rss;
    let rssPeak = mem0;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 100);
    const [sent, c] = await Promise.all([kind === 'none' ? Promise.resolve({ bytes: 0, statuses: {} }) : child(['--send', base, kind, String(SECONDS)]), child(['--read', base, String(SECONDS)])]);
    clearInterval(sampler);
    const ms = (ns: number) => Math.round(ns / 1e5) / 10;
    const r = c as { reads: number; readP50: number; readP99: number; readMax: number };
    const s = sent as { bytes: number; statuses: Record<string, number> };
    console.log(
      `${kind.padEnd(10)} export ${(s.bytes / 1048576).toFixed(2)} MiB, answers ${JSON.stringify(s.statuses)} | event-loop delay p50 ${ms(delay.percentile(50))} ms, p99 ${ms(delay.percentile(99))} ms, max ${ms(delay.max)} ms | trust reads ${r.reads}: p50 ${r.readP50.toFixed(1)} ms, p99 ${r.readP99.toFixed(1)} ms, max ${r.readMax.toFixed(1)} ms | RSS peak +${Math.round((rssPeak - mem0) / 1048576)} MB`,
    );
  }
  delay.disable();
} finally {
  await obs.close();
  await scratch.drop();
}
