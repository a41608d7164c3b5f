// Refusals that say when to retry say it in every protocol (docs/grpc.md "Errors per protocol",
// docs/telemetry.md "Answers and errors"). OTLP exporters that follow the specification (the
// Collector's, Go's) retry RESOURCE_EXHAUSTED only when the status carries a google.rpc.RetryInfo,
// and drop the batch otherwise: an OTLP/gRPC export refused by the request body budget (its
// network's share of bodies in flight full) was answered grpc-status 8 with an HTTP Retry-After only, and lost. Every
// gRPC, gRPC-Web and Connect refusal with a Retry-After now carries RetryInfo with the same delay
// (the OTLP/HTTP side: test/otlp.refusals.test.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http2 from 'node:http2';
import { Code, ConnectError, createClient, type Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { ExportResultCode } from '@opentelemetry/core';
import { RetryInfoSchema } from '../gen/google/rpc/error_details_pb.js';
import { Health } from '../gen/grpc/health/v1/health_pb.js';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { startTestApp, forwardedFor, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually, rawGet } from './support/connections.js';
import { grpcRetryHint, recordingSpanExporter, sendToolCalls } from './support/otel.js';

const MiB = 1024 * 1024;
const TRACES_GRPC = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';

/** The RetryInfo delay of an error an official connect-es client raised, or null. */
function connectRetryDelay(err: ConnectError): number | null {
  const [info] = err.findDetails(RetryInfoSchema);
  return info ? Number(info.retryDelay?.seconds ?? -1n) : null;
}

async function refusalOf(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => null,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err, 'the call was not refused').not.toBeNull();
  return err!;
}

async function heldBytes(port: number): Promise<number> {
  const m = await rawGet(port, '/metrics');
  return Number(/observatory_http_request_body_bytes\{state="held"\} (\d+)/.exec(m)?.[1] ?? NaN);
}

/**
 * An OTLP/gRPC export that declares no length and is never finished, its last bytes unsent: it
 * holds the whole 4 MiB of its network's share (a body of no stated length grows its reservation
 * as it arrives, to the route's 4 MiB once past half of it).
 */
function holdExport(base: string): http2.ClientHttp2Session {
  const s = http2.connect(base);
  s.on('error', () => {});
  const stream = s.request({ ':method': 'POST', ':path': TRACES_GRPC, 'content-type': 'application/grpc', te: 'trailers' });
  stream.on('error', () => {});
  const length = 4 * MiB - 64;
  const envelope = Buffer.alloc(5 + length - 16, 0);
  envelope.writeUInt32BE(length, 1);
  stream.write(envelope);
  return s;
}

describe(`refusals with Retry-After carry google.rpc.RetryInfo (${backend})`, () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    // The smallest budget: one client network's share is one OTLP export (4 MiB).
    t = await startTestApp({ HTTP_BODY_BUDGET_BYTES: String(32 * MiB), TRUST_PROXY: '1', RATE_LIMIT_SEARCH_PER_MINUTE: '1' });
    port = Number(new URL(t.base).port);
  });
  afterAll(async () => {
    await t?.close();
  });

  describe('an OTLP export beyond its network share of the body budget', () => {
    let holder: http2.ClientHttp2Session;
    beforeAll(async () => {
      holder = holdExport(t.base);
      expect(await eventually(async () => (await heldBytes(port)) >= 4 * MiB, 10_000)).toBe(true);
    });
    afterAll(() => holder?.destroy());

    it('the official OpenTelemetry gRPC exporter gets RESOURCE_EXHAUSTED with a RetryInfo equal to Retry-After (grpc-status-details-bin)', async () => {
      const rec = recordingSpanExporter(new GrpcTraceExporter({ url: t.base }));
      // The SDK's flush rejects with the failed export's error; the recorded result is what is checked.
      await sendToolCalls(rec.exporter, [{ url: 'https://retry-info.example.com/mcp', tool: 'search', latencyMs: 12 }]).catch(() => {});
      expect(rec.results.length).toBeGreaterThan(0);
      const result = rec.results[0]!;
      expect(result.code).toBe(ExportResultCode.FAILED);
      const hint = grpcRetryHint(result);
      expect(hint.code).toBe(Code.ResourceExhausted);
      expect(hint.retryAfter).toBeGreaterThan(0);
      expect(hint.status?.code).toBe(Code.ResourceExhausted);
      expect(hint.status?.message).toContain('HTTP_BODY_BUDGET_BYTES');
      expect(hint.retryInfo).toBe(hint.retryAfter);
    });

    it('connect-es clients read the same RetryInfo over gRPC, gRPC-Web, Connect unary and Connect streaming', async () => {
      const transports: [string, Transport][] = [
        ['grpc', createGrpcTransport({ baseUrl: t.base })],
        ['grpc-web', createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' })],
        ['connect', createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' })],
      ];
      for (const [name, transport] of transports) {
        const telemetry = createClient(TelemetryService, transport);
        const err = await refusalOf(telemetry.report({ serverUrl: 'https://retry-info.example.com/mcp', success: true, latencyMs: 5 }));
        expect(err.code, name).toBe(Code.ResourceExhausted);
        const retryAfter = Number(err.metadata.get('retry-after'));
        expect(retryAfter, name).toBeGreaterThan(0);
        expect(connectRetryDelay(err), name).toBe(retryAfter);
      }
      // Connect streaming: the error is the end-of-stream message, its details included.
      const streaming = createClient(TelemetryService, createConnectTransport({ baseUrl: t.base, httpVersion: '2' }));
      const err = await refusalOf(
        streaming.reportStream(
          (async function* () {
            yield { report: { serverUrl: 'https://retry-info.example.com/mcp', success: true, latencyMs: 5 } };
          })(),
        ),
      );
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(connectRetryDelay(err)).toBe(Number(err.metadata.get('retry-after')));
    });
  });

  it('a rate-limited call (the interceptor, before the handler) carries RetryInfo over gRPC and Connect', async () => {
    for (const [name, make] of [
      ['grpc', (ip: string) => createGrpcTransport({ baseUrl: t.base, interceptors: [forwardedFor(ip)] })],
      ['connect', (ip: string) => createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip)] })],
    ] as const) {
      const ip = name === 'grpc' ? '198.51.100.31' : '198.51.100.32';
      const trust = createClient(TrustService, make(ip));
      await trust.getLeaderboard({ q: 'retry' });
      const err = await refusalOf(trust.getLeaderboard({ q: 'retry' }));
      expect(err.code, name).toBe(Code.ResourceExhausted);
      const retryAfter = Number(err.metadata.get('retry-after'));
      expect(retryAfter, name).toBeGreaterThan(0);
      expect(connectRetryDelay(err), name).toBe(retryAfter);
    }
  });

  it('a streaming handler refusal (one Watch stream too many for the client network) carries RetryInfo', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.base, interceptors: [forwardedFor('198.51.100.33')] }));
    const abort = new AbortController();
    try {
      let refused: ConnectError | null = null;
      const open: AsyncIterator<unknown>[] = [];
      // An eighth of the instance's 200 Watch streams per client network: the 26th is refused.
      for (let i = 0; i < 40 && refused === null; i++) {
        const it = health.watch({ service: '' }, { signal: abort.signal })[Symbol.asyncIterator]();
        try {
          await it.next();
          open.push(it);
        } catch (e) {
          refused = ConnectError.from(e);
        }
      }
      expect(refused, 'no Watch stream was refused').not.toBeNull();
      expect(refused!.code).toBe(Code.ResourceExhausted);
      expect(connectRetryDelay(refused!)).toBe(Number(refused!.metadata.get('retry-after')));
    } finally {
      abort.abort();
    }
  });
});

describe(`a draining process (${backend})`, () => {
  it('refuses gRPC with UNAVAILABLE and RetryInfo', async () => {
    const app = await startTestApp();
    try {
      app.obs.health.drain();
      const err = await refusalOf(createClient(TelemetryService, createGrpcTransport({ baseUrl: app.base })).report({ serverUrl: 'https://retry-info.example.com/mcp', success: true, latencyMs: 5 }));
      expect(err.code).toBe(Code.Unavailable);
      const retryAfter = Number(err.metadata.get('retry-after'));
      expect(retryAfter).toBeGreaterThan(0);
      expect(connectRetryDelay(err)).toBe(retryAfter);

    } finally {
      await app.close();
    }
  });
});
