import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { ComplianceService } from '../gen/observatory/v1/compliance_pb.js';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

describe(`one port, every protocol (${backend})`, () => {
  const transports = () => ({
    'gRPC (HTTP/2 cleartext)': createGrpcTransport({ baseUrl: t.base }),
    'Connect JSON (HTTP/1.1)': createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', useBinaryFormat: false }),
    'Connect binary (HTTP/2)': createConnectTransport({ baseUrl: t.base, httpVersion: '2', useBinaryFormat: true }),
    'Connect GET (HTTP/1.1)': createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', useHttpGet: true }),
    'gRPC-Web (HTTP/1.1)': createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' }),
  });

  it('each protocol reaches the same handlers and the same data as REST', async () => {
    let i = 0;
    for (const [name, transport] of Object.entries(transports())) {
      const url = `https://proto-${i++}.example.com/mcp`;
      const telemetry = createClient(TelemetryService, transport);
      const trust = createClient(TrustService, transport);
      const rep = await telemetry.report({ serverUrl: url, success: true, latencyMs: 42, toolName: 'search_docs' });
      expect(rep, name).toMatchObject({ recorded: true, serverUrl: url });
      const rec = await trust.getTrust({ url });
      expect(rec.server?.url, name).toBe(url);
      expect(rec.metrics?.totalInteractions, name).toBe(1);
      const rest = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`));
      expect(rest.server.trust_score, name).toBe(rec.server?.trustScore);
    }
  });

  it('maps errors to Connect codes on every protocol', async () => {
    for (const [name, transport] of Object.entries(transports())) {
      const trust = createClient(TrustService, transport);
      const telemetry = createClient(TelemetryService, transport);
      await expect(trust.getTrust({ url: 'https://untracked.example.com' }), name).rejects.toMatchObject({ code: Code.NotFound });
      await expect(trust.getTrust({ url: '' }), name).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(telemetry.report({ serverUrl: 'https://x.example.com', latencyMs: 1 }), name).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(telemetry.report({ serverUrl: 'https://x.example.com', success: true, latencyMs: Number.NaN }), name).rejects.toMatchObject({
        code: Code.InvalidArgument,
      });
    }
  });

  it('maps probe refusals and bad input to InvalidArgument over gRPC', async () => {
    const client = createClient(ComplianceService, createGrpcTransport({ baseUrl: t.base }));
    for (const req of [{ server: '' }, { server: 'http://10.0.0.1/mcp' }, { server: 'https://x.example.com', standard: 'other' }]) {
      const err = await client.getComplianceAttestation(req).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    }
  });

  it('bulk-ingests a client stream over gRPC', async () => {
    const telemetry = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    async function* reports() {
      for (let i = 0; i < 20; i++) yield { report: { serverUrl: 'https://stream.example.com/mcp', success: i % 5 !== 0, latencyMs: 10 + i } };
      yield { report: { serverUrl: 'not-a-url', success: true, latencyMs: 1 } };
    }
    const res = await telemetry.reportStream(reports());
    expect(res.accepted).toBe(20);
    expect(res.rejected).toBe(1);
    expect(res.rejections[0]).toMatchObject({ index: 20, code: 'invalid_argument' });
    const rest = await json(fetch(`${t.base}/api/trust?url=https://stream.example.com/mcp`));
    expect(rest.metrics.total_interactions).toBe(20);
    expect(rest.metrics.success_rate).toBeCloseTo(16 / 20);
  });

  it('plain curl-style fetch of a Connect GET works for side-effect-free reads', async () => {
    const msg = encodeURIComponent(JSON.stringify({ url: 'https://stream.example.com/mcp' }));
    const res = await fetch(`${t.base}/observatory.v1.TrustService/GetTrust?connect=v1&encoding=json&message=${msg}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.server.url).toBe('https://stream.example.com/mcp');
  });
});
