// OTLP/HTTP refusals made before the receiver's handler runs are OTLP answers too (docs/telemetry.md
// "Answers and errors"): the OTLP specification wants every error body of /v1/traces and
// /v1/metrics to be a google.rpc.Status in the request's encoding (binary protobuf or JSON). The
// request body budget, the connection cap and a draining process answered them problem+json; they
// keep their status (429, 503) and Retry-After and now send a Status with a RetryInfo of the same
// delay, as OTLP/gRPC does (test/retry-info.test.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { create, createRegistry, fromBinary, fromJson, toBinary } from '@bufbuild/protobuf';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { Code } from '@connectrpc/connect';
import { RetryInfoSchema } from '../gen/google/rpc/error_details_pb.js';
import { StatusSchema, type Status } from '../gen/google/rpc/status_pb.js';
import { ExportTraceServiceRequestSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually, rawConnect } from './support/connections.js';
import { exportThrottled, holdBodyShare, recordingSpanExporter } from './support/otel.js';

const MiB = 1024 * 1024;
const STATUS_JSON = createRegistry(RetryInfoSchema);
/** A valid export of a few bytes (an empty message would declare Content-Length: 0, no body to reserve). */
const EXPORT = Buffer.from(toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{}] })));

/** The RetryInfo delay (whole seconds) a google.rpc.Status carries, or null. */
function retryDelayOf(status: Status): number | null {
  for (const any of status.details) {
    const info = anyUnpack(any, RetryInfoSchema);
    if (info) return Number(info.retryDelay?.seconds ?? -1n);
  }
  return null;
}

/** One OTLP/HTTP export over HTTP/1.1 (Content-Length set): status, headers and the body as bytes. */
function postOtlp(base: string, path: string, type: string, body: Buffer | string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  const u = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': type, 'content-length': Buffer.byteLength(body) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe(`OTLP/HTTP refusals before the receiver are google.rpc.Status (${backend})`, () => {
  let t: TestApp;
  let hold: { release(): Promise<void> } | undefined;
  beforeAll(async () => {
    // The smallest budget: one client network's share is one OTLP export (4 MiB), which an
    // unfinished export without a length holds.
    t = await startTestApp({ HTTP_BODY_BUDGET_BYTES: String(32 * MiB) });
    hold = await holdBodyShare(t.base);
  });
  afterAll(async () => {
    await hold?.release();
    await t?.close();
  });

  it('over the network share of the body budget: 429, Retry-After, a Status in protobuf or JSON as the export was sent', async () => {
    const proto = await postOtlp(t.base, '/v1/traces', 'application/x-protobuf', EXPORT);
    expect(proto.status).toBe(429);
    expect(proto.headers['content-type']).toBe('application/x-protobuf');
    const retryAfter = Number(proto.headers['retry-after']);
    expect(retryAfter).toBeGreaterThan(0);
    const status = fromBinary(StatusSchema, proto.body);
    expect(status.code).toBe(Code.ResourceExhausted);
    expect(status.message).toContain('HTTP_BODY_BUDGET_BYTES');
    expect(retryDelayOf(status)).toBe(retryAfter);

    const json = await postOtlp(t.base, '/v1/metrics', 'application/json', '{}');
    expect(json.status).toBe(429);
    expect(json.headers['content-type']).toMatch(/^application\/json/);
    const jsonStatus = fromJson(StatusSchema, JSON.parse(json.body.toString('utf8')), { registry: STATUS_JSON });
    expect(jsonStatus.code).toBe(Code.ResourceExhausted);
    expect(retryDelayOf(jsonStatus)).toBe(Number(json.headers['retry-after']));

    // Every other route keeps problem+json.
    const report = await postOtlp(t.base, '/api/report', 'application/json', JSON.stringify({ server_url: 'https://otlp-refusals.example.com/mcp', success: true, latency_ms: 3 }));
    expect(report.status).toBe(429);
    expect(report.headers['content-type']).toContain('application/problem+json');
  });
});

describe(`an OTLP/HTTP export refused at the connection cap (${backend})`, () => {
  it('is answered 429 with a google.rpc.Status in its encoding and Retry-After; other paths keep problem+json', async () => {
    const app = await startTestApp({ MAX_CONNECTIONS: '64', MAX_CONNECTIONS_PER_CLIENT: '4', HTTP_FIRST_BYTE_TIMEOUT_MS: '60000' });
    const p = Number(new URL(app.base).port);
    const hogs = await Promise.all(Array.from({ length: 4 }, () => rawConnect(p)));
    try {
      const connections = (ok: (n: number) => boolean) => eventually(() => new Promise<boolean>((r) => app.obs.app.server.getConnections((_e, n) => r(ok(n)))), 10_000);
      expect(await connections((n) => n >= 4)).toBe(true);
      const ask = async (head: string, body: Buffer | string) => {
        const c = await rawConnect(p, Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from(body)]));
        expect(await c.closedWithin()).toBe(true);
        // Gone before the next one: refused connections beyond a few more are closed at accept, unanswered.
        c.socket.destroy();
        expect(await connections((n) => n <= 4)).toBe(true);
        const raw = Buffer.from(c.data(), 'latin1');
        const split = raw.indexOf('\r\n\r\n');
        const headText = raw.subarray(0, split).toString('latin1');
        return { status: Number(headText.split(' ')[1]), head: headText, body: raw.subarray(split + 4) };
      };
      const proto = await ask(`POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: ${EXPORT.length}\r\n\r\n`, EXPORT);
      expect(proto.status).toBe(429);
      expect(proto.head).toMatch(/\r\ncontent-type: application\/x-protobuf\r\n/i);
      const retryAfter = Number(/\r\nretry-after: (\d+)/i.exec(proto.head)?.[1]);
      expect(retryAfter).toBeGreaterThan(0);
      const status = fromBinary(StatusSchema, proto.body);
      expect(status.code).toBe(Code.ResourceExhausted);
      expect(status.message).toContain('MAX_CONNECTIONS_PER_CLIENT');
      expect(retryDelayOf(status)).toBe(retryAfter);

      const json = await ask('POST /v1/metrics?x=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n', '{}');
      expect(json.status).toBe(429);
      expect(json.head).toMatch(/\r\ncontent-type: application\/json\r\n/i);
      const jsonStatus = fromJson(StatusSchema, JSON.parse(json.body.toString('utf8')), { registry: STATUS_JSON });
      expect(jsonStatus.code).toBe(Code.ResourceExhausted);
      expect(retryDelayOf(jsonStatus)).toBe(retryAfter);

      for (const head of ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', 'GET /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n', 'POST /v1/tracesX HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n']) {
        const other = await ask(head, '');
        expect(other.status, head).toBe(429);
        expect(other.head, head).toMatch(/application\/problem\+json/);
      }
    } finally {
      for (const h of hogs) h.socket.destroy();
      await app.close();
    }
  });
});

describe(`a draining process (${backend})`, () => {
  it('refuses an OTLP/HTTP export with 503, Retry-After and a google.rpc.Status', async () => {
    const app = await startTestApp();
    try {
      app.obs.health.drain();
      const otlp = await postOtlp(app.base, '/v1/traces', 'application/x-protobuf', EXPORT);
      expect(otlp.status).toBe(503);
      expect(otlp.headers['content-type']).toBe('application/x-protobuf');
      const status = fromBinary(StatusSchema, otlp.body);
      expect(status.code).toBe(Code.Unavailable);
      expect(Number(otlp.headers['retry-after'])).toBeGreaterThan(0);
      expect(retryDelayOf(status)).toBe(Number(otlp.headers['retry-after']));
    } finally {
      await app.close();
    }
  });
});

describe(`the stock OTLP/HTTP exporters and a refused export (${backend})`, () => {
  it('the 3.x exporters read the 429\'s Retry-After, retry after it, and the export lands once', async () => {
    const app = await startTestApp({ HTTP_BODY_BUDGET_BYTES: String(32 * MiB) });
    try {
      for (const [kind, Exporter] of [
        ['proto', ProtoTraceExporter],
        ['json', JsonTraceExporter],
      ] as const) {
        const SERVER = `https://otlp-throttled-${kind}.example.com/mcp`;
        const rec = recordingSpanExporter(new Exporter({ url: `${app.base}/v1/traces` }));
        const { retryAfterMs, retryDelaysMs } = await exportThrottled(app.base, rec.exporter, [
          { url: SERVER, tool: 'slow_tool', latencyMs: 25 },
          { url: SERVER, tool: 'slow_tool', latencyMs: 35 },
        ]);
        expect(retryAfterMs, kind).toBeGreaterThan(0);
        // The exporter's first retry waited what the service said (its own backoff is 1 s +-20%).
        expect(retryDelaysMs[0], kind).toBe(retryAfterMs);
        expect(rec.results, kind).toHaveLength(1);
        expect(rec.ok(), kind).toBe(true);
        expect((await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(SERVER)}`))).metrics.total_interactions, kind).toBe(2);
      }
    } finally {
      await app.close();
    }
  }, 60_000);
});
