// The thin Connect adapter (src/http/connect-adapter.ts): what it changes about moving bytes
// between node:http and connect's handlers, tested on a real socket with the official clients.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import net from 'node:net';
import { getEventListeners } from 'node:events';
import { collectWarnings } from './support/warnings.js';
import { rawExchange } from './support/connections.js';
import Fastify, { type FastifyInstance } from 'fastify';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { toBinary, create } from '@bufbuild/protobuf';
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus as Status } from '../gen/grpc/health/v1/health_pb.js';
import { connectPlugin } from '../src/http/connect-adapter.js';
import { createDualProtocolServer } from '../src/http/listener.js';
import { loadConfig } from '../src/config.js';

let app: FastifyInstance;
let base: string;
/** The signals of the calls the handlers saw, in arrival order, with what they said when the handler returned. */
const calls: { method: string; signal: AbortSignal; service: string; abortedAtStart: boolean; requestSignal?: AbortSignal }[] = [];
const READ_MAX = 4096;

beforeAll(async () => {
  const httpConfig = loadConfig({}).http;
  app = Fastify({ serverFactory: ((handler: Parameters<typeof createDualProtocolServer>[0]) => createDualProtocolServer(handler, httpConfig)) as never });
  await app.register(connectPlugin, {
    readMaxBytes: READ_MAX,
    routes: (router) =>
      router.service(Health, {
        async check(req, ctx) {
          // requestSignal: the adapter's signal, which connect keeps on the context it builds (not typed).
          calls.push({ method: 'check', signal: ctx.signal, service: req.service, abortedAtStart: ctx.signal.aborted, requestSignal: (ctx as { requestSignal?: AbortSignal }).requestSignal });
          return { status: Status.SERVING };
        },
        async *watch(req, ctx) {
          calls.push({ method: 'watch', signal: ctx.signal, service: req.service, abortedAtStart: ctx.signal.aborted });
          yield { status: Status.SERVING };
          // Held open until the client goes away.
          await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        },
      }),
  });
  base = (await app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
});
afterAll(async () => {
  await app?.close();
});

const last = () => calls[calls.length - 1]!;
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

/** A Health service behind the adapter on a fastify of its own, its log lines kept. */
async function adapterApp(contextValues?: () => never): Promise<{ app: FastifyInstance; url: string; logs: { level: number; msg: string }[] }> {
  const logs: { level: number; msg: string }[] = [];
  const own = Fastify({
    logger: { level: 'info', stream: { write: (line: string) => void logs.push(JSON.parse(line)) } },
    serverFactory: ((handler: Parameters<typeof createDualProtocolServer>[0]) => createDualProtocolServer(handler, loadConfig({}).http)) as never,
  });
  await own.register(connectPlugin, {
    contextValues,
    routes: (router) =>
      router.service(Health, {
        async check() {
          return { status: Status.SERVING };
        },
      }),
  });
  const url = (await own.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  return { app: own, url, logs };
}

function rawPost(path: string, headers: Record<string, string | number>, body?: Buffer, agent?: http.Agent): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, { method: 'POST', headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('thin Connect adapter', () => {
  it('answers every protocol through the library handlers', async () => {
    for (const transport of [
      createConnectTransport({ baseUrl: base, httpVersion: '1.1' }),
      createConnectTransport({ baseUrl: base, httpVersion: '1.1', useBinaryFormat: true }),
      createConnectTransport({ baseUrl: base, httpVersion: '1.1', useHttpGet: true }),
      createConnectTransport({ baseUrl: base, httpVersion: '2' }),
      createGrpcTransport({ baseUrl: base }),
      createGrpcWebTransport({ baseUrl: base, httpVersion: '1.1' }),
    ]) {
      const res = await createClient(Health, transport).check({ service: 'x' });
      expect(res.status).toBe(Status.SERVING);
      expect(last().service).toBe('x');
    }
  });

  it('writes a unary answer (success or error) with a Content-Length, not chunked', async () => {
    const res = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json' }, Buffer.from('{"service":"len"}'));
    expect(res.status).toBe(200);
    expect(res.headers['transfer-encoding']).toBeUndefined();
    expect(Number(res.headers['content-length'])).toBe(res.body.length);
    expect(JSON.parse(res.body.toString())).toEqual({ status: 'SERVING' });
    expect(last().service).toBe('len');
    // A Connect error answer is unary too.
    const bad = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json' }, Buffer.from('{"service":'));
    expect(bad.status).toBe(400);
    expect(bad.headers['transfer-encoding']).toBeUndefined();
    expect(JSON.parse(bad.body.toString())).toMatchObject({ code: 'invalid_argument' });
  });

  it('reads a chunked body (no Content-Length) and a binary one', async () => {
    const body = Buffer.from(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: 'chunked' })));
    const res = await new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
      const req = http.request(`${base}/grpc.health.v1.Health/Check`, { method: 'POST', headers: { 'content-type': 'application/proto', 'transfer-encoding': 'chunked' } }, (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('end', () => resolve({ status: r.statusCode!, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.write(body.subarray(0, 3));
      setTimeout(() => req.end(body.subarray(3)), 20);
    });
    expect(res.status).toBe(200);
    expect(last().service).toBe('chunked');
  });

  it('refuses a body over readMaxBytes with resource_exhausted, stated or chunked', async () => {
    const big = Buffer.from(JSON.stringify({ service: 'x'.repeat(READ_MAX * 2) }));
    const stated = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json', 'content-length': big.length }, big);
    expect(JSON.parse(stated.body.toString())).toMatchObject({ code: 'resource_exhausted' });
    const chunked = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, big);
    expect(JSON.parse(chunked.body.toString())).toMatchObject({ code: 'resource_exhausted' });
  });

  it('aborts the handler when the client goes away mid-call (Connect over HTTP/1.1 and gRPC over HTTP/2)', async () => {
    for (const transport of [createConnectTransport({ baseUrl: base, httpVersion: '1.1' }), createGrpcTransport({ baseUrl: base })]) {
      const client = createClient(Health, transport);
      const ac = new AbortController();
      const it = client.watch({ service: 'watch' }, { signal: ac.signal })[Symbol.asyncIterator]();
      expect((await it.next()).value?.status).toBe(Status.SERVING);
      const call = last();
      expect(call.method).toBe('watch');
      expect(call.signal.aborted).toBe(false);
      ac.abort();
      await it.next().catch(() => {});
      expect(await until(() => call.signal.aborted)).toBe(true);
      expect(ConnectError.from(call.signal.reason).code).toBe(Code.Canceled);
    }
  });

  it('over HTTP/1.1 the calls of one connection share its signal: after refused bodies, errors and 60 calls none starts canceled, and nothing piles up on it', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    let connections = 0;
    const onConnection = () => connections++;
    app.server.on('connection', onConnection);
    try {
      const client = createClient(Health, createConnectTransport({ baseUrl: base, httpVersion: '1.1', nodeOptions: { agent } }));
      const viaGet = createClient(Health, createConnectTransport({ baseUrl: base, httpVersion: '1.1', useHttpGet: true, nodeOptions: { agent } }));
      const big = Buffer.from(JSON.stringify({ service: 'x'.repeat(READ_MAX * 2) }));
      for (let i = 0; i < 60; i++) {
        if (i % 10 === 0) {
          // Bodies the handler stops reading (stated too long, or chunked past the limit: the
          // request's stream is destroyed, the request fails, its connection lives on), a GET (no
          // body), and a message that does not parse.
          const refused = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json', 'content-length': big.length }, big, agent);
          expect(JSON.parse(refused.body.toString())).toMatchObject({ code: 'resource_exhausted' });
          const chunked = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, big, agent);
          expect(JSON.parse(chunked.body.toString())).toMatchObject({ code: 'resource_exhausted' });
          expect((await viaGet.check({ service: `get-${i}` })).status).toBe(Status.SERVING);
          const bad = await rawPost('/grpc.health.v1.Health/Check', { 'content-type': 'application/json' }, Buffer.from('{"service":'), agent);
          expect(bad.status).toBe(400);
        }
        expect((await client.check({ service: `seq-${i}` })).status).toBe(Status.SERVING);
        expect(last()).toMatchObject({ service: `seq-${i}`, abortedAtStart: false });
      }
      // Still one connection or close to it (a refused body may cost one): the calls did share them.
      expect(connections).toBeLessThanOrEqual(13);
      // No call left a listener behind on the connection's signal.
      const signals = new Set(calls.slice(-60).map((c) => c.requestSignal));
      expect(signals.has(undefined)).toBe(false);
      // Shared: a new one only on a new connection or after a refused body (at most two a round).
      expect(signals.size).toBeLessThanOrEqual(connections + 12);
      for (const sig of signals) expect(getEventListeners(sig!, 'abort')).toHaveLength(0);
    } finally {
      app.server.off('connection', onConnection);
      agent.destroy();
    }
  });

  it('answers 30 calls pipelined on one connection, each on its own, without a listener warning', async () => {
    const warnings = collectWarnings();
    try {
      const { port } = new URL(base);
      const body = '{"service":"piped"}';
      const one = `POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
      const text = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), '127.0.0.1', () => socket.end(one.repeat(30)));
        let got = '';
        socket.on('data', (c: Buffer) => (got += c.toString()));
        socket.on('end', () => resolve(got));
        socket.on('error', reject);
      });
      expect(text.match(/HTTP\/1\.1 200 OK/g)).toHaveLength(30);
      expect(text.match(/"status":"SERVING"/g)).toHaveLength(30);
      const piped = calls.filter((c) => c.service === 'piped');
      expect(piped).toHaveLength(30);
      expect(piped.every((c) => !c.abortedAtStart)).toBe(true);
      await new Promise((r) => setImmediate(r));
      expect(warnings.named('MaxListenersExceededWarning')).toEqual([]);
    } finally {
      warnings.stop();
    }
  });

  it('answers a request whose Host is no authority, or that names none, with invalid_argument in its protocol (never an empty 200), and logs nothing', async () => {
    const { app: own, url, logs } = await adapterApp();
    try {
      const port = new URL(url).port;
      const path = '/grpc.health.v1.Health/Check';
      // Connect unary, HTTP/1.1, a Host with a space in it.
      const connect = await rawExchange(port, `POST ${path} HTTP/1.1\r\nHost: a b\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      expect(connect.status).toBe(400);
      expect(connect.headers['content-type']).toMatch(/^application\/json/);
      expect(JSON.parse(connect.body)).toEqual({ code: 'invalid_argument', message: expect.stringMatching(/host "a b" is not a valid authority/) });
      // gRPC-Web, the same Host.
      const web = await rawExchange(port, `POST ${path} HTTP/1.1\r\nHost: a b\r\nContent-Type: application/grpc-web+proto\r\nContent-Length: 5\r\nConnection: close\r\n\r\n\u0000\u0000\u0000\u0000\u0000`);
      expect(web.status).toBe(200);
      expect(web.headers['grpc-status']).toBe(String(Code.InvalidArgument));
      // HTTP/1.0 needs no Host; without one there is no URL to form.
      const none = await rawExchange(port, `POST ${path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`);
      expect(none.status).toBe(400);
      expect(JSON.parse(none.body)).toEqual({ code: 'invalid_argument', message: expect.stringMatching(/names no host/) });
      // The same call with a proper Host is served.
      const fine = await rawExchange(port, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      expect(fine.status).toBe(200);
      expect(JSON.parse(fine.body)).toEqual({ status: 'SERVING' });
      expect(logs.filter((l) => l.level >= 50)).toEqual([]);
    } finally {
      await own.close();
    }
  });

  it('answers a failure of its own as an internal error in the caller\'s protocol (never an empty 200), and logs it', async () => {
    const { app: own, url, logs } = await adapterApp(() => {
      throw new Error('a bug in the context values');
    });
    try {
      const client = createClient(Health, createConnectTransport({ baseUrl: url, httpVersion: '1.1' }));
      await expect(client.check({ service: 'x' })).rejects.toMatchObject({ code: Code.Internal });
      const web = createClient(Health, createGrpcWebTransport({ baseUrl: url, httpVersion: '1.1' }));
      await expect(web.check({ service: 'x' })).rejects.toMatchObject({ code: Code.Internal });
      const grpc = createClient(Health, createGrpcTransport({ baseUrl: url }));
      await expect(grpc.check({ service: 'x' })).rejects.toMatchObject({ code: Code.Internal });
      expect(logs.filter((l) => l.level >= 50).map((l) => l.msg)).toEqual(Array(3).fill('handler for rpc Check of grpc.health.v1.Health failed'));
    } finally {
      await own.close();
    }
  });

  it('survives a client that closes before sending the body it announced', async () => {
    await new Promise<void>((resolve) => {
      const req = http.request(`${base}/grpc.health.v1.Health/Check`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': 100 } });
      req.on('error', () => resolve());
      req.write('{"service":');
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 30);
    });
    // Still serving.
    const res = await createClient(Health, createConnectTransport({ baseUrl: base, httpVersion: '1.1' })).check({ service: 'after' });
    expect(res.status).toBe(Status.SERVING);
  });
});
