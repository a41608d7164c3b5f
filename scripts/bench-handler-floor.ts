// The library's floor for a unary call: @connectrpc/connect's own handler, in one process, with
// no socket, no HTTP parser, no database and a method that answers a fixed message. Whatever the
// service spends per Connect or gRPC call on top of this is ours (the adapter, the telemetry
// write, the answer on the wire); this much is the library's, whatever the service does.
//
// The figure that bounds the service is the main thread's time per call (wall time with 50 calls
// in flight, the thread never idle): a single event loop cannot run more calls a second than
// 1,000,000 / that. The CPU figure adds V8's helper threads (garbage collection runs beside the
// main thread).
//
// `npx tsx scripts/bench-handler-floor.ts` prints a table; with --json (how `npm run bench` runs it,
// as a child process with its own heap) one JSON line.
import '../src/runtime-flags.js';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { create, toBinary, toJsonString } from '@bufbuild/protobuf';
import { createConnectRouter } from '@connectrpc/connect';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import { encodeEnvelope } from '@connectrpc/connect/protocol';
import type { UniversalHandler, UniversalServerRequest } from '@connectrpc/connect/protocol';
import { ReportRequestSchema, ReportResponseSchema, TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';

export interface FloorResult {
  protocol: string;
  /** Main-thread time per call (µs): 1e6 / this bounds the calls a second of one event loop. */
  wallUs: number;
  /** CPU time per call (µs), V8's helper threads included. */
  cpuUs: number;
  calls: number;
}

const CONCURRENCY = 50;

interface Protocol {
  name: string;
  contentType: string;
  httpVersion: '1.1' | '2.0';
  body: Uint8Array;
}

function protocols(): Protocol[] {
  const request = create(ReportRequestSchema, { serverUrl: 'https://bench-5.example.com/mcp', success: true, latencyMs: 42, toolName: 'search' });
  const binary = toBinary(ReportRequestSchema, request);
  return [
    { name: 'Connect unary, JSON', contentType: 'application/json', httpVersion: '1.1', body: new TextEncoder().encode(toJsonString(ReportRequestSchema, request)) },
    { name: 'Connect unary, binary', contentType: 'application/proto', httpVersion: '1.1', body: binary },
    { name: 'gRPC unary', contentType: 'application/grpc', httpVersion: '2.0', body: encodeEnvelope(0, binary) },
    { name: 'gRPC-Web unary', contentType: 'application/grpc-web+proto', httpVersion: '1.1', body: encodeEnvelope(0, binary) },
  ];
}

function reportHandler(): UniversalHandler {
  const router = createConnectRouter({ acceptCompression: [compressionGzip, compressionBrotli] });
  const answer = create(ReportResponseSchema, { recorded: true, serverUrl: 'https://bench-5.example.com/mcp' });
  router.rpc(TelemetryService.method.report, () => Promise.resolve(answer));
  const handler = router.handlers.find((h) => h.requestPath === '/observatory.v1.TelemetryService/Report');
  if (!handler) throw new Error('no handler for Report');
  return handler;
}

async function* once(chunk: Uint8Array): AsyncIterable<Uint8Array> {
  yield chunk;
}

async function call(handler: UniversalHandler, p: Protocol): Promise<void> {
  const header = new Headers({ 'content-type': p.contentType });
  if (p.httpVersion === '2.0') header.set('te', 'trailers');
  const req: UniversalServerRequest = {
    httpVersion: p.httpVersion,
    method: 'POST',
    url: 'http://127.0.0.1/observatory.v1.TelemetryService/Report',
    header,
    body: once(p.body),
    signal: new AbortController().signal,
  };
  const res = await handler(req);
  let bytes = 0;
  if (res.body instanceof Uint8Array) bytes = res.body.byteLength;
  else if (res.body) for await (const chunk of res.body) bytes += chunk.byteLength;
  const status = res.trailer?.get('grpc-status');
  if (res.status !== 200 || bytes === 0 || (status !== undefined && status !== null && status !== '0')) {
    throw new Error(`${p.name}: HTTP ${res.status}, grpc-status ${status}, ${bytes} bytes`);
  }
}

async function drive(handler: UniversalHandler, p: Protocol, ms: number): Promise<FloorResult> {
  const end = performance.now() + ms;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let calls = 0;
  while (performance.now() < end) {
    await Promise.all(Array.from({ length: CONCURRENCY }, () => call(handler, p)));
    calls += CONCURRENCY;
  }
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return { protocol: p.name, wallUs: (wall * 1000) / calls, cpuUs: (cpu.user + cpu.system) / calls, calls };
}

/** Measures every protocol, each after a warm-up, for `seconds` each. */
export async function measureFloor(seconds: number): Promise<FloorResult[]> {
  const handler = reportHandler();
  const out: FloorResult[] = [];
  for (const p of protocols()) {
    await drive(handler, p, 500);
    out.push(await drive(handler, p, seconds * 1000));
  }
  return out;
}

/** Runs the measurement in a child process of its own (its own heap and JIT), as the bench does. */
export function runHandlerFloor(seconds: number): Promise<FloorResult[]> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--json', `--seconds=${seconds}`], { timeout: 120_000 }, (err, stdout) => {
      if (err) return reject(err);
      try {
        resolve(JSON.parse(stdout.trim().split('\n').pop()!) as FloorResult[]);
      } catch (e) {
        reject(e);
      }
    });
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const seconds = Number(process.argv.find((a) => a.startsWith('--seconds='))?.slice(10) ?? 3);
  const results = await measureFloor(seconds);
  if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(results)}\n`);
  else {
    process.stdout.write('| Protocol | main thread µs/call | calls/s bound (one event loop) | CPU µs/call |\n|---|---:|---:|---:|\n');
    for (const r of results) process.stdout.write(`| ${r.protocol} | ${r.wallUs.toFixed(1)} | ${Math.round(1e6 / r.wallUs)} | ${r.cpuUs.toFixed(1)} |\n`);
  }
}
