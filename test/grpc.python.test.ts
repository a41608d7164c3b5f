import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import path from 'node:path';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { generatePythonStubs, pythonGrpcUnavailable, runPython, type PythonStubs } from './support/python-stubs.js';

// A polyglot client: Python stubs generated from proto/ at test time with Debian's protoc and
// gRPC Python plugin, run under Debian's /usr/bin/python3 with python3-grpcio (C-core HTTP/2,
// not our own client library), over h2c against the real service. Every answer is checked
// against what REST says about the same data.

const missing = await pythonGrpcUnavailable();
if (missing) console.log(`SKIP test/grpc.python.test.ts: no Python gRPC toolchain: ${missing}`);

const SCRIPT = path.resolve('test/support/python/polyglot_client.py');
const num = (v: unknown) => Number(v);

describe.skipIf(missing !== null)(`Python gRPC client from generated stubs (${backend})`, () => {
  let t: TestApp;
  let stubs: PythonStubs;
  beforeAll(async () => {
    [t, stubs] = await Promise.all([startTestApp(), generatePythonStubs()]);
  }, 180_000);
  afterAll(async () => {
    await t?.close();
    await stubs?.cleanup();
  });

  it('unary calls, a client stream, health and reflection answer what REST answers', async () => {
    const runId = `${process.pid}-${Date.now()}`;
    const out = JSON.parse(await runPython(stubs, SCRIPT, [new URL(t.base).host, runId])) as Record<string, any>;
    const one = `https://py-${runId}-unary.example.com/mcp`;
    const many = `https://py-${runId}-stream.example.com/mcp`;

    expect(out.report).toEqual({ recorded: true, server_url: one });
    expect(num(out.report_stream.accepted)).toBe(10);
    expect(num(out.report_stream.rejected)).toBe(1);
    expect(out.report_stream.rejections[0]).toMatchObject({ server_url: 'not-a-url', code: 'invalid_argument' });

    for (const [key, url, interactions] of [['trust_unary', one, 1], ['trust_stream', many, 10]] as const) {
      const rest = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`));
      const py = out[key];
      expect(py.server.url).toBe(url);
      expect(num(py.metrics.total_interactions)).toBe(interactions);
      expect(num(py.metrics.total_interactions)).toBe(rest.metrics.total_interactions);
      expect(num(py.metrics.success_rate)).toBeCloseTo(rest.metrics.success_rate, 9);
      expect(num(py.metrics.avg_latency_ms)).toBeCloseTo(rest.metrics.avg_latency_ms, 9);
      expect(num(py.server.trust_score)).toBe(rest.server.trust_score);
      expect(py.server.slug).toBe(rest.server.slug);
      expect(py.verdict).toBe(rest.verdict);
    }
    expect(num(out.trust_stream.metrics.success_rate)).toBeCloseTo(0.8, 9);
    const board = await json(fetch(`${t.base}/api/leaderboard`));
    expect(out.leaderboard.servers.map((s: { url: string }) => s.url)).toEqual(board.servers.map((s: { url: string }) => s.url));

    // Errors as grpcio reports them: the gRPC status, never a transport failure.
    expect(out.errors.not_tracked.code).toBe('NOT_FOUND');
    expect(out.errors.invalid.code).toBe('INVALID_ARGUMENT');
    expect(out.errors.oversize.code).toBe('RESOURCE_EXHAUSTED');
    expect(out.errors.unknown_method.code).toBe('UNIMPLEMENTED');

    expect(out.health['']).toBe('SERVING');
    expect(out.health['observatory.v1.TrustService']).toBe('SERVING');
    expect(out.health.unknown.code).toBe('NOT_FOUND');
    expect(out.health.watch_first).toBe('SERVING');
    expect((await fetch(`${t.base}/readyz`)).status).toBe(200);

    expect(out.reflection_services).toEqual(
      expect.arrayContaining(['observatory.v1.TrustService', 'observatory.v1.TelemetryService', 'observatory.v1.ReceiptService', 'observatory.v1.ComplianceService', 'observatory.v1.AccessService', 'grpc.health.v1.Health']),
    );
    expect(out.reflection_methods).toEqual(TrustService.methods.map((m) => m.name).sort());
    expect(out.reflection_unknown).toBe(5); // NOT_FOUND
    // A call made with message classes built from the reflected descriptors alone.
    expect(out.reflection_call.server.url).toBe(one);
    expect(num(out.reflection_call.server.trust_score)).toBe(num(out.trust_unary.server.trust_score));
  }, 240_000);
});
