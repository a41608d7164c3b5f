// gRPC clients send no Content-Length (grpc-js, grpc-go, the OpenTelemetry Collector), so an
// OTLP/gRPC export used to reserve the route's whole limit (4 MiB) from the request body budget
// before a byte was read: a client network could have eight exports in flight at the default
// budget, and an OpenTelemetry Collector (ten export workers by default) had the ninth and tenth
// refused whenever its queue backed up, however small its exports. A call without a stated length
// now reserves a first step and grows its reservation as its bytes arrive; what would pass the
// network's share or the process's budget is refused then, in gRPC, with a RetryInfo
// (docs/reliability.md "Request bodies in flight").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http2 from 'node:http2';
import net from 'node:net';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { encodeEnvelope } from '@connectrpc/connect/protocol';
import { RetryInfoSchema } from '../gen/google/rpc/error_details_pb.js';
import { StatusSchema } from '../gen/google/rpc/status_pb.js';
import { ExportTraceServiceRequestSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually, rawGet } from './support/connections.js';

const MiB = 1024 * 1024;
// The smallest budget allowed: eight of the largest body (4 MiB); one client network's share is 4 MiB.
const BUDGET = 32 * MiB;
const EXPORT = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';

let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await startTestApp({ HTTP_BODY_BUDGET_BYTES: String(BUDGET) });
  port = Number(new URL(t.base).port);
});
afterAll(async () => {
  await t?.close();
});

function session(from = '127.0.0.1'): http2.ClientHttp2Session {
  const s = http2.connect(t.base, { createConnection: () => net.connect({ port, host: '127.0.0.1', localAddress: from }) });
  s.on('error', () => {});
  return s;
}

/** A gRPC export message of about `bytes` bytes (a resource attribute), enveloped. */
function exportMessage(bytes: number): Buffer {
  const msg = create(ExportTraceServiceRequestSchema, {
    resourceSpans: [{ resource: { attributes: [{ key: 'service.name', value: { value: { case: 'stringValue', value: 'x'.repeat(bytes) } } }] }, scopeSpans: [] }],
  });
  return Buffer.from(encodeEnvelope(0, toBinary(ExportTraceServiceRequestSchema, msg)));
}

interface Call {
  stream: http2.ClientHttp2Stream;
  /** grpc-status once known (trailers, or headers of a trailers-only answer); null while none. */
  status: () => string | null;
  trailers: () => http2.IncomingHttpHeaders;
}

/** Opens a gRPC export without a Content-Length, as gRPC clients send them, and writes `first` of `body`. */
function openCall(s: http2.ClientHttp2Session, body: Buffer, first: number): Call {
  const stream = s.request({ ':method': 'POST', ':path': EXPORT, 'content-type': 'application/grpc+proto', te: 'trailers' });
  stream.on('error', () => {});
  let status: string | null = null;
  let trailers: http2.IncomingHttpHeaders = {};
  stream.on('response', (h) => {
    if (h['grpc-status'] !== undefined) {
      status = String(h['grpc-status']);
      trailers = h;
    }
  });
  stream.on('trailers', (h) => {
    status = String(h['grpc-status']);
    trailers = h;
  });
  stream.on('data', () => {});
  stream.write(body.subarray(0, first));
  return { stream, status: () => status, trailers: () => trailers };
}

async function heldBytes(): Promise<number> {
  const m = await rawGet(port, '/metrics');
  return Number(/observatory_http_request_body_bytes\{state="held"\} (\d+)/.exec(m)?.[1] ?? NaN);
}

describe(`gRPC bodies of no stated length in the request body budget (${backend})`, () => {
  it("many small gRPC exports in flight from one network are all served: each holds what it sent, not the route's 4 MiB", async () => {
    const s = session('127.0.2.1');
    const body = exportMessage(3000);
    // Twelve exports, each half sent: before, the first took the network's whole share (4 MiB)
    // and the other eleven were answered RESOURCE_EXHAUSTED at once.
    const calls = Array.from({ length: 12 }, () => openCall(s, body, 1500));
    await new Promise((r) => setTimeout(r, 300));
    expect(calls.map((c) => c.status())).toEqual(calls.map(() => null));
    for (const c of calls) c.stream.end(body.subarray(1500));
    expect(await eventually(() => calls.every((c) => c.status() !== null), 10_000)).toBe(true);
    expect(calls.map((c) => c.status())).toEqual(calls.map(() => '0'));
    s.close();
    expect(await eventually(async () => (await heldBytes()) === 0, 10_000)).toBe(true);
  });

  it("an export growing past its network's share is refused while it arrives, RESOURCE_EXHAUSTED with a RetryInfo; its bytes are released", async () => {
    const s = session('127.0.2.2');
    const big = exportMessage(3 * MiB);
    const a = openCall(s, big, 2 * MiB);
    const b = openCall(s, big, 64 * 1024);
    await new Promise((r) => setTimeout(r, 200));
    // a holds about 2 MiB, b its first step: both still reading.
    expect(a.status()).toBeNull();
    expect(b.status()).toBeNull();
    // b grows to 3 MiB: 5 MiB together, past the network's 4 MiB share.
    b.stream.write(big.subarray(64 * 1024, 3 * MiB));
    expect(await eventually(() => b.status() !== null, 10_000)).toBe(true);
    expect(b.status()).toBe('8'); // RESOURCE_EXHAUSTED
    const details = b.trailers()['grpc-status-details-bin'];
    expect(typeof details).toBe('string');
    const st = fromBinary(StatusSchema, Buffer.from(String(details), 'base64'));
    const retry = st.details.find((d) => d.typeUrl.endsWith(RetryInfoSchema.typeName));
    expect(retry).toBeDefined();
    expect(fromBinary(RetryInfoSchema, retry!.value).retryDelay?.seconds).toBeGreaterThan(0n);
    expect(decodeURIComponent(String(b.trailers()['grpc-message']))).toContain('HTTP_BODY_BUDGET_BYTES');
    // a was within the share: it finishes and is served.
    a.stream.end(big.subarray(2 * MiB));
    expect(await eventually(() => a.status() !== null, 10_000)).toBe(true);
    expect(a.status()).toBe('0');
    s.close();
    expect(await eventually(async () => (await heldBytes()) === 0, 10_000)).toBe(true);
  });
});
