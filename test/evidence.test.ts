import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { Code, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { canonicalJson, endpointHealth } from '../src/services/receipt.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

const clock = new Date('2026-11-25T12:00:00Z');
let t: TestApp;
const URL_ = 'https://evidence.example.com/mcp';
const q = (u: string) => encodeURIComponent(u);

beforeAll(async () => {
  t = await startTestApp({}, { now: () => clock });
  // Latencies 1..100 ms, every 10th call failing: p95 (continuous) is 95.05 ms, mean 50.5 ms, success 0.9.
  await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      postJson(`${t.base}/api/report`, { server_url: URL_, success: i % 10 !== 9, latency_ms: i + 1, tool_name: 'get_forecast' }),
    ),
  );
});
afterAll(async () => {
  await t?.close();
});

const decode = (jws: string) => JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString());

describe(`behavioral evidence (${backend})`, () => {
  it('summarises real metrics for a tracked server and signs the document', async () => {
    const res = await fetch(`${t.base}/v1/behavioral-evidence?url=${q(URL_)}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    const trust = await json(fetch(`${t.base}/api/trust?url=${q(URL_)}`));
    expect(body).toMatchObject({
      schema: 'mcp-behavioral-evidence-v1.0',
      server_url: URL_,
      observed_at: clock.toISOString(),
      observer: t.config.publicBaseUrl,
      found: true,
      trust_score: trust.server.trust_score,
      verdict: trust.verdict,
    });
    const s = body.behavioral_summary;
    expect(s.total_interactions).toBe(100);
    expect(s.success_rate).toBeCloseTo(0.9);
    expect(s.avg_latency_ms).toBeCloseTo(50.5);
    expect(s.p95_latency_ms).toBeCloseTo(95.05);
    expect(s.last_observed).toBe(clock.toISOString());
    expect(s.category).toBe(trust.server.category);
    expect(s.anomaly_flags).toEqual(trust.anomaly.anomaly_flags);
    // The attestation is this document, signed; it verifies at /v1/verify.
    const v = await json(fetch(`${t.base}/v1/verify?jws=${body.attestation}`));
    expect(v.valid).toBe(true);
    expect(v.payload).toMatchObject({ kind: 'attestation', sub: URL_, schema: body.schema, trust_score: body.trust_score, behavioral_summary: s });
  });

  it('answers found:false (not an error) for unknown servers, still signed', async () => {
    const res = await fetch(`${t.base}/v1/behavioral-evidence?url=${q('https://nobody.example.com')}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ schema: 'mcp-behavioral-evidence-v1.0', server_url: 'https://nobody.example.com', found: false, trust_score: null, behavioral_summary: null });
    expect(decode(body.attestation)).toMatchObject({ found: false, sub: 'https://nobody.example.com' });
    expect((await fetch(`${t.base}/v1/verify?jws=${body.attestation}`)).status).toBe(200);
  });

  it('rejects a missing or invalid url with 400', async () => {
    await expectProblem(await fetch(`${t.base}/v1/behavioral-evidence`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/behavioral-evidence?url=not%20a%20url`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/erc8004-attestation`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/erc8004-attestation?url=ftp://x.example.com`), 400, 'invalid_argument');
  });

  it('serves its JSON Schema at a stable URL, and the documents satisfy its required members', async () => {
    const res = await fetch(`${t.base}/schemas/mcp-behavioral-evidence-v1.0.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/schema\+json/);
    const schema = await json(res);
    expect(schema.$id).toBe(`${t.config.publicBaseUrl}/schemas/mcp-behavioral-evidence-v1.0.json`);
    expect(schema.properties.schema.const).toBe('mcp-behavioral-evidence-v1.0');
    const doc = await json(fetch(`${t.base}/v1/behavioral-evidence?url=${q(URL_)}`));
    for (const k of schema.required) expect(doc).toHaveProperty(k);
    for (const k of schema.properties.behavioral_summary.required) expect(doc.behavioral_summary).toHaveProperty(k);
    for (const k of Object.keys(doc)) expect(schema.properties, k).toHaveProperty(k);
  });
});

describe(`ERC-8004 attestation (${backend})`, () => {
  it('attests endpoint health with a 0-100 response, a tag, the evidence URI and its hash, signed and stored', async () => {
    const res = await fetch(`${t.base}/v1/erc8004-attestation?url=${q(URL_)}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    const trust = await json(fetch(`${t.base}/api/trust?url=${q(URL_)}`));
    const response = Math.round(trust.server.trust_score);
    expect(body).toMatchObject({
      schema: 'erc8004-attestation-v1.0',
      server_url: URL_,
      attested_at: clock.toISOString(),
      attesting_observer: t.config.publicBaseUrl,
      found: true,
      response,
      endpoint_health_status: endpointHealth(response),
      tag: 'mcp-endpoint-health',
      evidence_uri: `${t.config.publicBaseUrl}/v1/behavioral-evidence?url=${q(URL_)}`,
      trust_score: trust.server.trust_score,
    });
    expect(body.evidence_hash).toMatch(/^0x[0-9a-f]{64}$/);
    const claim = decode(body.attestation);
    expect(claim).toMatchObject({ kind: 'attestation', jti: body.receipt_id, response, evidence_hash: body.evidence_hash });
    // Anyone can recompute the hash from the signed evidence document.
    expect(`0x${createHash('sha256').update(canonicalJson(claim.evidence)).digest('hex')}`).toBe(body.evidence_hash);
    expect(claim.evidence).toMatchObject({ schema: 'mcp-behavioral-evidence-v1.0', server_url: URL_, found: true });
    const stored = await json(fetch(`${t.base}/v1/receipt/${body.receipt_id}`));
    expect(stored).toMatchObject({ kind: 'attestation', jws: body.attestation, verification: { valid: true } });
  });

  it('maps the response to health bands at their edges', () => {
    expect([100, 70, 69, 40, 39, 0].map(endpointHealth)).toEqual(['HEALTHY', 'HEALTHY', 'DEGRADED', 'DEGRADED', 'UNHEALTHY', 'UNHEALTHY']);
  });

  it('says UNKNOWN with response 0 for a server it never observed, still signed', async () => {
    const body = await json(fetch(`${t.base}/v1/erc8004-attestation?url=${q('https://nobody.example.com/mcp')}`));
    expect(body).toMatchObject({ found: false, response: 0, endpoint_health_status: 'UNKNOWN', trust_score: null });
    expect((await fetch(`${t.base}/v1/verify?jws=${body.attestation}`)).status).toBe(200);
  });

  it('serves both over gRPC', async () => {
    const c = createClient(ReceiptService, createGrpcTransport({ baseUrl: t.base }));
    const ev = await c.getBehavioralEvidence({ url: URL_ });
    expect(ev.found).toBe(true);
    expect(ev.behavioralSummary?.totalInteractions).toBe(100);
    const at = await c.getErc8004Attestation({ url: URL_ });
    expect(at.receiptId).toMatch(/^[0-9a-f]{16}$/);
    await expect(c.getBehavioralEvidence({ url: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
  });
});
