import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http2 from 'node:http2';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import path from 'node:path';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { create, createFileRegistry, fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { RetryInfoSchema } from '../gen/google/rpc/error_details_pb.js';
import { Health, HealthCheckResponse_ServingStatus as Status } from '../gen/grpc/health/v1/health_pb.js';
import * as reflectionV1 from '../gen/grpc/reflection/v1/reflection_pb.js';
import * as reflectionV1alpha from '../gen/grpc/reflection/v1alpha/reflection_pb.js';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { expectProblem, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import type { Db } from '../src/db/index.js';

const run = promisify(execFile);
const BUF = path.resolve('node_modules/.bin/buf');

const OBSERVATORY_SERVICES = [
  'observatory.v1.TrustService',
  'observatory.v1.TelemetryService',
  'observatory.v1.ReceiptService',
  'observatory.v1.ComplianceService',
  'observatory.v1.AccessService',
];

/** The test's database, with a switch that makes it unreachable the way a lost PostgreSQL is (ECONNREFUSED). */
function switchableDb(real: Db): { db: Db; down: (v: boolean) => void } {
  let isDown = false;
  const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  const db: Db = Object.create(real) as Db;
  Object.assign(db, {
    ping: async () => (isDown ? false : real.ping()),
    liveness: real.liveness ? async () => (isDown ? { live: false, reason: 'the database is unreachable' } : real.liveness!()) : undefined,
    // The test's database is closed (and dropped) by its owner, after the service has stopped.
    close: async () => {},
    query: async (sql: string, params?: readonly unknown[]) => {
      if (isDown) throw refused();
      return real.query(sql, params);
    },
  });
  return { db, down: (v) => (isDown = v) };
}

/** One raw HTTP/2 request: status, headers, whether the headers ended the stream (trailers-only), trailers, body. */
function h2Request(base: string, pathname: string, headers: http2.OutgoingHttpHeaders, body?: Buffer) {
  return new Promise<{ status: number; headers: http2.IncomingHttpHeaders; headersEndStream: boolean; trailers: http2.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const session = http2.connect(base);
    session.on('error', reject);
    const req = session.request({ ':method': 'POST', ':path': pathname, ...headers });
    let head: http2.IncomingHttpHeaders = {};
    let endStream = false;
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h, flags) => {
      head = h;
      endStream = (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0;
    });
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      session.close();
      resolve({ status: Number(head[':status']), headers: head, headersEndStream: endStream, trailers, body: Buffer.concat(chunks) });
    });
    req.on('error', (e) => {
      session.destroy();
      reject(e);
    });
    req.end(body);
  });
}

/** A gRPC length-prefixed message frame. */
function grpcFrame(payload: Buffer): Buffer {
  const out = Buffer.alloc(5 + payload.length);
  out.writeUInt32BE(payload.length, 1);
  payload.copy(out, 5);
  return out;
}

async function nextOf<T>(it: AsyncIterator<T>): Promise<T> {
  const r = await it.next();
  if (r.done) throw new Error('the stream ended');
  return r.value;
}

describe(`gRPC health checking (${backend})`, () => {
  let tdb: TestDatabase;
  let sw: ReturnType<typeof switchableDb>;
  let t: TestApp;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    sw = switchableDb(tdb.db);
    t = await startTestApp({ GRPC_HEALTH_INTERVAL_MS: '100' }, { tdb: { ...tdb, db: sw.db } });
  });
  afterAll(async () => {
    await t?.close();
    await tdb?.drop();
  });

  it('Check answers SERVING for "" and every observatory service, NOT_FOUND for an unknown one, over gRPC, gRPC-Web and Connect', async () => {
    for (const transport of [createGrpcTransport({ baseUrl: t.base }), createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' }), createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' })]) {
      const health = createClient(Health, transport);
      for (const service of ['', ...OBSERVATORY_SERVICES, 'envoy.service.auth.v3.Authorization', 'grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection']) {
        expect((await health.check({ service })).status, service).toBe(Status.SERVING);
      }
      await expect(health.check({ service: 'observatory.v1.NoSuchService' })).rejects.toMatchObject({ code: Code.NotFound });
    }
    const list = await createClient(Health, createGrpcTransport({ baseUrl: t.base })).list({});
    for (const s of ['', ...OBSERVATORY_SERVICES]) expect(list.statuses[s]?.status, s).toBe(Status.SERVING);
  });

  it('NOT_SERVING while the database is unreachable, SERVING again on recovery; Watch streams each change', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.base }));
    const abort = new AbortController();
    const watch = health.watch({ service: 'observatory.v1.TrustService' }, { signal: abort.signal })[Symbol.asyncIterator]();
    const unknown = health.watch({ service: 'no.such.Service' }, { signal: abort.signal })[Symbol.asyncIterator]();
    try {
      expect((await nextOf(watch)).status).toBe(Status.SERVING);
      expect((await nextOf(unknown)).status).toBe(Status.SERVICE_UNKNOWN);
      sw.down(true);
      expect((await nextOf(watch)).status).toBe(Status.NOT_SERVING);
      // Check agrees (after the shared result ages out), and REST's /readyz says the same.
      await new Promise((r) => setTimeout(r, 300));
      expect((await health.check({ service: '' })).status).toBe(Status.NOT_SERVING);
      expect((await fetch(`${t.base}/readyz`)).status).toBe(503);
      // A handler that meets the lost database answers UNAVAILABLE, never INTERNAL with the driver's message.
      const err = await createClient(TrustService, createGrpcTransport({ baseUrl: t.base })).getTrust({ url: 'https://down.example.com/mcp' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unavailable);
      expect((err as ConnectError).rawMessage).not.toMatch(/ECONNREFUSED|5432/);
      // Retry-After as REST says it, and the google.rpc.RetryInfo gRPC clients read (test/retry-info.test.ts).
      expect((err as ConnectError).metadata.get('retry-after')).toBe('2');
      expect((err as ConnectError).findDetails(RetryInfoSchema)[0]?.retryDelay?.seconds).toBe(2n);
      sw.down(false);
      expect((await nextOf(watch)).status).toBe(Status.SERVING);
      await new Promise((r) => setTimeout(r, 300));
      expect((await health.check({ service: '' })).status).toBe(Status.SERVING);
    } finally {
      sw.down(false);
      abort.abort();
    }
  });
});

describe(`draining (${backend})`, () => {
  it('a draining process is NOT_SERVING: Watch gets the change and ends, new calls are refused in each protocol, close() is not held', async () => {
    const t = await startTestApp({ GRPC_HEALTH_INTERVAL_MS: '100' });
    let closed = false;
    try {
      const health = createClient(Health, createGrpcTransport({ baseUrl: t.base }));
      const watch = health.watch({ service: '' })[Symbol.asyncIterator]();
      expect((await nextOf(watch)).status).toBe(Status.SERVING);
      t.obs.health.drain();
      expect((await nextOf(watch)).status).toBe(Status.NOT_SERVING);
      expect((await watch.next()).done).toBe(true);
      expect((await health.check({ service: '' }).catch((e: unknown) => e)) as ConnectError).toMatchObject({ code: Code.Unavailable });
      const connect = await fetch(`${t.base}/observatory.v1.TrustService/GetStats`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      expect(connect.status).toBe(503);
      expect(await connect.json()).toMatchObject({ code: 'unavailable' });
      await expectProblem(await fetch(`${t.base}/api/stats`), 503, 'unavailable');
      await t.close();
      closed = true;
    } finally {
      if (!closed) await t.close();
    }
  });
});

describe(`server reflection (${backend})`, () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
  });

  it('`buf curl --list-methods` lists every method with no proto files, and calls a method by reflection', async () => {
    const cwd = '/tmp'; // no buf.yaml, no proto/: reflection is the only schema source
    const { stdout } = await run(BUF, ['curl', '--list-methods', '--protocol', 'grpc', '--http2-prior-knowledge', t.base], { cwd, timeout: 60_000 });
    const methods = stdout.trim().split('\n');
    for (const m of ['observatory.v1.TrustService/GetTrust', 'observatory.v1.TelemetryService/ReportStream', 'grpc.health.v1.Health/Check', 'grpc.health.v1.Health/Watch', 'envoy.service.auth.v3.Authorization/Check']) {
      expect(methods).toContain(m);
    }
    const alpha = await run(BUF, ['curl', '--list-services', '--reflect-protocol', 'grpc-v1alpha', '--protocol', 'grpc', '--http2-prior-knowledge', t.base], { cwd, timeout: 60_000 });
    expect(alpha.stdout.trim().split('\n')).toEqual(expect.arrayContaining(OBSERVATORY_SERVICES));
    const health = await run(BUF, ['curl', '--protocol', 'grpc', '--http2-prior-knowledge', '-d', '{"service":""}', `${t.base}/grpc.health.v1.Health/Check`], { cwd, timeout: 60_000 });
    expect(JSON.parse(health.stdout)).toEqual({ status: 'SERVING' });
    const report = await run(BUF, ['curl', '--protocol', 'grpc', '--http2-prior-knowledge', '-d', '{"server_url":"https://reflected.example.com/mcp","success":true,"latency_ms":12}', `${t.base}/observatory.v1.TelemetryService/Report`], { cwd, timeout: 60_000 });
    expect(JSON.parse(report.stdout)).toMatchObject({ recorded: true });
    const rest = (await (await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://reflected.example.com/mcp')}`)).json()) as { metrics: { total_interactions: number } };
    expect(rest.metrics.total_interactions).toBe(1);
  });

  for (const [version, r] of [['v1', reflectionV1], ['v1alpha', reflectionV1alpha]] as const) {
    it(`${version}: files by symbol and name carry their imports and build a working registry; unknown names are NOT_FOUND`, async () => {
      const client = createClient(r.ServerReflection as typeof reflectionV1.ServerReflection, createGrpcTransport({ baseUrl: t.base }));
      const questions: reflectionV1.ServerReflectionRequest['messageRequest'][] = [
        { case: 'listServices', value: '' },
        { case: 'fileContainingSymbol', value: 'observatory.v1.TrustService' },
        { case: 'fileContainingSymbol', value: 'observatory.v1.TrustService.GetTrust' },
        { case: 'fileByFilename', value: 'observatory/v1/telemetry.proto' },
        { case: 'fileContainingSymbol', value: 'observatory.v1.NoSuch' },
        { case: 'fileByFilename', value: '../../etc/passwd' },
        { case: 'allExtensionNumbersOfType', value: 'observatory.v1.GetTrustRequest' },
        { case: undefined },
      ];
      async function* requests() {
        for (const q of questions) yield create(reflectionV1.ServerReflectionRequestSchema, { host: 'x', messageRequest: q });
      }
      const answers: reflectionV1.ServerReflectionResponse[] = [];
      for await (const a of client.serverReflectionInfo(requests())) answers.push(a);
      expect(answers).toHaveLength(questions.length);
      const [list, bySymbol, byMethod, byFilename, unknownSymbol, unknownFile, extensions, empty] = answers.map((a) => a.messageResponse);
      expect(list?.case).toBe('listServicesResponse');
      expect((list!.value as reflectionV1.ListServiceResponse).service.map((s) => s.name)).toEqual(expect.arrayContaining([...OBSERVATORY_SERVICES, 'grpc.health.v1.Health', `grpc.reflection.${version}.ServerReflection`]));
      // The file and every import, each once per stream: a registry built from them resolves the service.
      const files = [bySymbol, byMethod, byFilename].flatMap((a) => (a?.case === 'fileDescriptorResponse' ? a.value.fileDescriptorProto : [])).map((b) => fromBinary(FileDescriptorProtoSchema, b));
      expect(files[0]?.name).toBe('observatory/v1/trust.proto');
      const names = files.map((f) => f.name);
      expect(new Set(names).size).toBe(names.length - 1); // trust.proto twice (asked twice), its imports once
      const byName = new Map(files.map((f) => [f.name, f]));
      const registry = createFileRegistry(byName.get('observatory/v1/trust.proto')!, (name) => byName.get(name));
      const trust = registry.getService('observatory.v1.TrustService');
      expect(trust?.methods.map((m) => m.name)).toEqual(TrustService.methods.map((m) => m.name));
      const telemetryRegistry = createFileRegistry(byName.get('observatory/v1/telemetry.proto')!, (name) => byName.get(name));
      expect(telemetryRegistry.getMessage('observatory.v1.ReportRequest')?.fields.map((f) => f.name)).toEqual(expect.arrayContaining(['server_url', 'success', 'latency_ms']));
      expect(unknownSymbol).toMatchObject({ case: 'errorResponse', value: { errorCode: Code.NotFound } });
      expect(unknownFile).toMatchObject({ case: 'errorResponse', value: { errorCode: Code.NotFound } });
      expect(extensions).toMatchObject({ case: 'allExtensionNumbersResponse', value: { baseTypeName: 'observatory.v1.GetTrustRequest', extensionNumber: [] } });
      expect(empty).toMatchObject({ case: 'errorResponse', value: { errorCode: Code.InvalidArgument } });
      expect(answers[1]?.originalRequest?.messageRequest).toEqual({ case: 'fileContainingSymbol', value: 'observatory.v1.TrustService' });
    });
  }
});

describe(`native errors per protocol (${backend})`, () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
  });
  const unknown = '/observatory.v1.TrustService/NoSuchMethod';
  const big = 'x'.repeat(100 * 1024); // over the default BODY_LIMIT (64 KiB)

  describe('gRPC: HTTP 200 with grpc-status', () => {
    it('an unknown method is UNIMPLEMENTED, as a trailers-only response', async () => {
      const res = await h2Request(t.base, unknown, { 'content-type': 'application/grpc', te: 'trailers' }, grpcFrame(Buffer.alloc(0)));
      expect(res.status).toBe(200);
      expect(res.headersEndStream).toBe(true);
      expect(res.headers['content-type']).toBe('application/grpc');
      expect(res.headers['grpc-status']).toBe(String(Code.Unimplemented));
      expect(decodeURIComponent(String(res.headers['grpc-message']))).toContain('unknown method /observatory.v1.TrustService/NoSuchMethod');
      // ... and an unknown service too, on any path of the RPC shape.
      const svc = await h2Request(t.base, '/no.such.Service/Call', { 'content-type': 'application/grpc+proto' }, grpcFrame(Buffer.alloc(0)));
      expect(svc.headers['grpc-status']).toBe(String(Code.Unimplemented));
    });
    it('an oversize message is RESOURCE_EXHAUSTED; invalid input INVALID_ARGUMENT; a malformed message INVALID_ARGUMENT', async () => {
      const trust = createClient(TrustService, createGrpcTransport({ baseUrl: t.base }));
      await expect(trust.getTrust({ url: big })).rejects.toMatchObject({ code: Code.ResourceExhausted });
      await expect(trust.getTrust({ url: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
      const garbage = await h2Request(t.base, '/observatory.v1.TrustService/GetTrust', { 'content-type': 'application/grpc' }, grpcFrame(Buffer.from([0xff, 0xff, 0xff])));
      expect(garbage.status).toBe(200);
      expect(garbage.trailers['grpc-status'] ?? garbage.headers['grpc-status']).toBe(String(Code.InvalidArgument));
    });
  });

  describe('an early answer does not hold its stream', () => {
    it('a client that stops sending after an early error (and never ends its side) is told to stop with RST_STREAM NO_ERROR within seconds, not HTTP_REQUEST_TIMEOUT_MS', async () => {
      // What connect-node's gRPC client does after RESOURCE_EXHAUSTED for an oversize message: it
      // has its status and sends no more, but leaves its side of the stream open. That held the
      // stream, its session and a graceful shutdown for the request deadline (60 s).
      const session = http2.connect(t.base);
      session.on('error', () => {});
      try {
        const req = session.request({ ':method': 'POST', ':path': '/observatory.v1.TrustService/GetTrust', 'content-type': 'application/grpc', te: 'trailers' });
        let error: unknown = null;
        req.on('error', (e) => (error = e));
        req.resume();
        const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => req.once('trailers', resolve));
        const closed = new Promise<number | undefined>((resolve) => req.once('close', () => resolve(req.rstCode)));
        // The envelope (flags 0, length 102,400) announces a message over the limit; part of it
        // is sent, then nothing more.
        req.write(Buffer.concat([Buffer.from([0, 0x00, 0x01, 0x90, 0x00]), Buffer.alloc(16 * 1024, 0x0a)]));
        expect((await trailers)['grpc-status']).toBe(String(Code.ResourceExhausted));
        const answeredAt = Date.now();
        const rst = await Promise.race([closed, new Promise<'held'>((resolve) => setTimeout(() => resolve('held'), 20_000))]);
        expect(rst).toBe(http2.constants.NGHTTP2_NO_ERROR);
        expect(Date.now() - answeredAt).toBeLessThan(20_000);
        expect(error).toBeNull(); // a clean end for the client, not a stream error
      } finally {
        session.destroy();
      }
    });

    it('the official client\'s early-error call leaves nothing that holds a shutdown', async () => {
      const own = await startTestApp();
      const trust = createClient(TrustService, createGrpcTransport({ baseUrl: own.base }));
      await expect(trust.getTrust({ url: big })).rejects.toMatchObject({ code: Code.ResourceExhausted });
      const started = Date.now();
      await own.close();
      // The process's own shutdown limit is 15 s; before, this waited out the 60 s request deadline.
      expect(Date.now() - started).toBeLessThan(15_000);
    });
  });

  describe('gRPC-Web: HTTP 200 with grpc-status headers', () => {
    it('an unknown method is UNIMPLEMENTED', async () => {
      for (const type of ['application/grpc-web+proto', 'application/grpc-web-text']) {
        const res = await fetch(`${t.base}${unknown}`, { method: 'POST', headers: { 'content-type': type }, body: type.endsWith('text') ? grpcFrame(Buffer.alloc(0)).toString('base64') : grpcFrame(Buffer.alloc(0)) });
        expect(res.status, type).toBe(200);
        expect(res.headers.get('grpc-status'), type).toBe(String(Code.Unimplemented));
        expect(res.headers.get('content-type'), type).toMatch(/^application\/grpc-web/);
        expect(await res.text()).toBe('');
      }
    });
    it('an oversize message is RESOURCE_EXHAUSTED and invalid input INVALID_ARGUMENT through the official client', async () => {
      const trust = createClient(TrustService, createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' }));
      await expect(trust.getTrust({ url: big })).rejects.toMatchObject({ code: Code.ResourceExhausted });
      await expect(trust.getTrust({ url: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
    });
  });

  describe('Connect: a Connect error body on every refusal', () => {
    const connectError = async (res: Response, status: number, code: string) => {
      const text = await res.text();
      expect(res.status, text).toBe(status);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      const body = JSON.parse(text) as { code: string; message: string };
      expect(body.code, text).toBe(code);
      expect(body.message.length).toBeGreaterThan(0);
      return body;
    };
    it('an unknown method is 404 unimplemented (JSON and GET)', async () => {
      await connectError(await fetch(`${t.base}${unknown}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }), 404, 'unimplemented');
      await connectError(await fetch(`${t.base}${unknown}?connect=v1&encoding=json&message=%7B%7D`), 404, 'unimplemented');
    });
    it('an unknown streaming method answers an end-of-stream error with HTTP 200', async () => {
      const res = await fetch(`${t.base}/observatory.v1.TelemetryService/NoSuchStream`, { method: 'POST', headers: { 'content-type': 'application/connect+json' }, body: grpcFrame(Buffer.from('{}')) });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('application/connect+json');
      const frame = Buffer.from(await res.arrayBuffer());
      expect(frame[0]).toBe(0x02);
      expect(JSON.parse(frame.subarray(5, 5 + frame.readUInt32BE(1)).toString())).toMatchObject({ error: { code: 'unimplemented' } });
    });
    it('the refusals the runtime used to answer with empty bodies: GET without parameters, JSON on a client stream, GET on a method with side effects', async () => {
      await connectError(await fetch(`${t.base}/observatory.v1.TrustService/GetTrust`), 415, 'invalid_argument');
      await connectError(await fetch(`${t.base}/observatory.v1.TelemetryService/ReportStream`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }), 415, 'invalid_argument');
      const res = await fetch(`${t.base}/observatory.v1.TrustService/Preflight?connect=v1&encoding=json&message=%7B%7D`);
      expect(res.headers.get('allow')).toBe('POST');
      await connectError(res, 405, 'unimplemented');
    });
    it('an unsupported content type, an oversize body and invalid input', async () => {
      await connectError(await fetch(`${t.base}/observatory.v1.TrustService/GetTrust`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' }), 400, 'invalid_argument');
      await connectError(await fetch(`${t.base}/observatory.v1.TrustService/GetTrust`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ url: big }) }), 429, 'resource_exhausted');
      await connectError(await fetch(`${t.base}/observatory.v1.TrustService/GetTrust`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"url":""}' }), 400, 'invalid_argument');
      const trust = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
      await expect(trust.getTrust({ url: big })).rejects.toMatchObject({ code: Code.ResourceExhausted });
      const telemetry = createClient(TelemetryService, createConnectTransport({ baseUrl: t.base, httpVersion: '2' }));
      async function* one() {
        yield { report: { serverUrl: big, success: true, latencyMs: 1 } };
      }
      await expect(telemetry.reportStream(one())).rejects.toMatchObject({ code: Code.ResourceExhausted });
    });
  });

  describe('REST keeps problem+json', () => {
    it('unknown path 404, oversize 413, unsupported type 415', async () => {
      await expectProblem(await fetch(`${t.base}/v1/no-such-thing`), 404, 'not_found');
      await expectProblem(await fetch(`${t.base}/api/report`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ server_url: big }) }), 413, 'payload_too_large');
      await expectProblem(await fetch(`${t.base}/api/report`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' }), 415, 'unsupported_media_type');
    });
  });
});
