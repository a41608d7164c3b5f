import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash, createPublicKey, verify as edVerify } from 'node:crypto';
import { Code, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { canonicalJson, endpointHealth } from '../src/services/receipt.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';
import { MARKET_FIGURES_MS } from '../src/services/trust.js';

// A fixed clock so the trust record is byte-identical across reads.
const T0 = new Date('2026-11-25T12:00:00Z');
let clock = T0;
const now = () => clock;
let t: TestApp;
const GOOD = 'https://good.example.com/mcp';
const BAD = 'https://bad.example.com/mcp';
const EVIDENCE_URL = 'https://evidence.example.com/mcp';
const q = (u: string) => encodeURIComponent(u);

async function report(url: string, success: boolean, latency = 100) {
  const r = await postJson(`${t.base}/api/report`, { server_url: url, success, latency_ms: latency, tool_name: 'search' });
  expect(r.status).toBe(200);
}

// One app for the whole file (starting one is the expensive part on a loaded machine).
beforeAll(async () => {
  t = await startTestApp({}, { now });
  await Promise.all(Array.from({ length: 40 }, (_, i) => report(GOOD, true, 80 + (i % 7))));
  await Promise.all(Array.from({ length: 40 }, (_, i) => report(BAD, i % 10 === 0, 900)));
  // Latencies 1..100 ms, every 10th call failing: p95 about 95 ms, mean 50.5 ms, success 0.9.
  await Promise.all(Array.from({ length: 100 }, (_, i) => report(EVIDENCE_URL, i % 10 !== 9, i + 1)));
}, 180_000);
afterAll(async () => {
  await t?.close();
});

const preflight = (target: string) => fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`);

/** Verifies a compact JWS with node:crypto alone against a JWKS document (no jose, none of our code). */
function verifyWithNodeCrypto(jws: string, jwks: { keys: Record<string, string>[] }): Record<string, unknown> | null {
  const [h, p, s] = jws.split('.');
  const header = JSON.parse(Buffer.from(h!, 'base64url').toString('utf8'));
  if (header.alg !== 'EdDSA' && header.alg !== 'Ed25519') return null;
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  if (!jwk) return null;
  const key = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: 'jwk' });
  const ok = edVerify(null, Buffer.from(`${h}.${p}`), key, Buffer.from(s!, 'base64url'));
  return ok ? JSON.parse(Buffer.from(p!, 'base64url').toString('utf8')) : null;
}

describe(`pre-flight (${backend})`, () => {
  it('answers PASS for a healthy server with a signed diligence receipt', async () => {
    const res = await preflight(GOOD);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const body = await json(res);
    const trust = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(GOOD)}`));
    expect(body).toMatchObject({
      target: GOOD,
      server_url: GOOD,
      verdict: 'PASS',
      trust_score: trust.server.trust_score,
      recommendation: 'proceed',
      tracked: true,
      total_interactions: 40,
      name: 'good.example.com/mcp',
    });
    expect(body.receipt_id).toMatch(/^[0-9a-f]{16}$/);
    expect(body.diligence_receipt.split('.')).toHaveLength(3);
    const header = JSON.parse(Buffer.from(body.diligence_receipt.split('.')[0], 'base64url').toString());
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'JWT' });
    const payload = JSON.parse(Buffer.from(body.diligence_receipt.split('.')[1], 'base64url').toString());
    expect(payload).toMatchObject({
      iss: t.config.publicBaseUrl,
      sub: GOOD,
      jti: body.receipt_id,
      kind: 'preflight',
      iat: Math.floor(clock.getTime() / 1000),
      verdict: 'PASS',
      trust_score: body.trust_score,
      recommendation: 'proceed',
    });
  });

  it('resolves names and slugs, and says FAIL for a failing server', async () => {
    for (const target of ['bad.example.com/mcp', 'bad-example-com-mcp', 'HTTPS://BAD.example.com:443/mcp/']) {
      const body = await json(preflight(target));
      expect(body, target).toMatchObject({ server_url: BAD, verdict: 'FAIL', recommendation: 'block', tracked: true });
      expect(body.trust_score).toBeLessThan(40);
    }
  });

  it('answers UNRATED (no score, not tracked afterwards) for unknown targets', async () => {
    const url = 'https://unknown.example.com/mcp';
    const body = await json(preflight(url));
    expect(body).toMatchObject({ target: url, server_url: url, verdict: 'UNRATED', trust_score: null, tracked: false, total_interactions: 0 });
    expect(body.recommendation).toMatch(/no runtime evidence/);
    await expectProblem(await fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`), 404, 'not_tracked');
    const byName = await json(preflight('some unknown server'));
    expect(byName).toMatchObject({ verdict: 'UNRATED', server_url: null, tracked: false });
    const payload = JSON.parse(Buffer.from(byName.diligence_receipt.split('.')[1], 'base64url').toString());
    expect(payload.sub).toBe('some unknown server');
  });

  it('rejects a missing, empty, oversized or malformed target with 400', async () => {
    await expectProblem(await fetch(`${t.base}/v1/preflight`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/preflight?target=`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/preflight?target=%20%20`), 400, 'invalid_argument');
    await expectProblem(await preflight('x'.repeat(5000)), 400, 'invalid_argument');
    await expectProblem(await preflight('http://'), 400, 'invalid_argument');
    await expectProblem(await preflight('https://exa mple.com/'), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/preflight?target=a&target=b`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/preflight?target=x`, { method: 'POST' }), 405, 'method_not_allowed');
  });

  it('never changes a score: the trust record is identical before and after 50 pre-flights', async () => {
    const read = async () => (await fetch(`${t.base}/api/trust?url=${encodeURIComponent(GOOD)}`)).text();
    const before = await Promise.all([read(), (await fetch(`${t.base}/api/trust?url=${encodeURIComponent(BAD)}`)).text()]);
    for (let i = 0; i < 50; i++) {
      const r = await preflight(i % 2 ? GOOD : 'bad-example-com-mcp');
      expect(r.status).toBe(200);
    }
    const after = await Promise.all([read(), (await fetch(`${t.base}/api/trust?url=${encodeURIComponent(BAD)}`)).text()]);
    expect(after).toEqual(before);
    expect(JSON.parse(after[0]).metrics.total_interactions).toBe(40);
  });

  it('resolves its receipt by id with a live re-verification', async () => {
    const pf = await json(preflight(GOOD));
    const res = await fetch(`${t.base}/v1/receipt/${pf.receipt_id}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    const kid = JSON.parse(Buffer.from(pf.diligence_receipt.split('.')[0], 'base64url').toString()).kid;
    expect(body).toMatchObject({
      receipt_id: pf.receipt_id,
      issued_at: clock.toISOString(),
      jws: pf.diligence_receipt,
      kind: 'preflight',
      verification: { valid: true, kid, checked_at: clock.toISOString() },
    });
    expect(body.claim).toMatchObject({ jti: pf.receipt_id, verdict: 'PASS', sub: GOOD });
  });

  it('answers 400 for malformed receipt ids and 404 for unknown ones', async () => {
    for (const bad of ['0123456789ABCDEF', '0123456789abcde', '0123456789abcdef0', 'zzzzzzzzzzzzzzzz', 'x'.repeat(300), '%00']) {
      await expectProblem(await fetch(`${t.base}/v1/receipt/${bad}`), 400, 'invalid_argument');
    }
    await expectProblem(await fetch(`${t.base}/v1/receipt/0123456789abcdef`), 404, 'not_found');
  });

  it('verifies its receipt at /v1/verify and with node:crypto alone against the JWKS fetched over HTTP', async () => {
    const pf = await json(preflight(GOOD));
    const v = await fetch(`${t.base}/v1/verify?jws=${pf.diligence_receipt}`);
    expect(v.status).toBe(200);
    const vb = await json(v);
    expect(vb).toMatchObject({ valid: true, header: { alg: 'EdDSA', typ: 'JWT' }, payload: { jti: pf.receipt_id, verdict: 'PASS' } });
    const jwks = await json(fetch(`${t.base}/.well-known/jwks.json`));
    expect(verifyWithNodeCrypto(pf.diligence_receipt, jwks)).toMatchObject({ jti: pf.receipt_id, sub: GOOD, kind: 'preflight' });
    const [h, p, s] = pf.diligence_receipt.split('.');
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p, 'base64url').toString()), verdict: 'PASS', trust_score: 99 })).toString('base64url');
    expect(verifyWithNodeCrypto(`${h}.${forged}.${s}`, jwks)).toBeNull();
  });

  it('counts pre-flights as demand, per window and verdict', async () => {
    const d0 = await json(fetch(`${t.base}/api/demand`));
    const total0 = d0.total_preflight_checks;
    clock = new Date(clock.getTime() + 10 * 24 * 3600_000); // ten days later
    await preflight(GOOD);
    await preflight('another unknown');
    const d = await json(fetch(`${t.base}/api/demand`));
    expect(d.total_preflight_checks).toBe(total0 + 2);
    expect(d.windows.map((w: { window: string }) => w.window)).toEqual(['24h', '7d', '30d', 'alltime']);
    const w24 = d.windows[0];
    expect(w24).toMatchObject({ total_checks: 2, unique_targets: 2, verdict_mix: { pass: 1, uncertain: 0, fail: 0, unrated: 1 } });
    const good = w24.servers.find((s: { target: string }) => s.target === GOOD);
    expect(good).toMatchObject({ server_url: GOOD, name: 'good.example.com/mcp', checks: 1, last_verdict: 'PASS', last_checked_at: clock.toISOString() });
    expect(w24.servers.find((s: { target: string }) => s.target === 'another unknown')).toMatchObject({ server_url: null, name: null, last_verdict: 'UNRATED' });
    const all = d.windows[3];
    expect(all.total_checks).toBe(d.total_preflight_checks);
    expect(all.verdict_mix).toEqual(d.verdict_mix);
    expect(all.servers[0].checks).toBeGreaterThanOrEqual(all.servers[1].checks);
    const mix = d.verdict_mix;
    expect(mix.pass + mix.uncertain + mix.fail + mix.unrated).toBe(d.total_preflight_checks);
    expect(d.note).toMatch(/never feed trust scores/);
  });

  it('counts every call of a shared claim: identical checks are one row with their number, and every figure counts each call', async () => {
    clock = new Date(clock.getTime() + 2 * 24 * 3600_000); // two days on: the 24h window holds only this test's checks
    const stats0 = await json(fetch(`${t.base}/api/stats`));
    const d0 = await json(fetch(`${t.base}/api/demand`));
    const all0 = d0.windows[3].servers.find((s: { target: string }) => s.target === GOOD);
    const answers = await Promise.all([...Array.from({ length: 7 }, () => GOOD), ...Array.from({ length: 3 }, () => BAD)].map((u) => json(preflight(u))));
    const goodIds = new Set(answers.slice(0, 7).map((a) => a.receipt_id));
    expect(goodIds.size).toBe(1); // one claim, one receipt
    await aggregatesSettled(); // demand figures follow within AGGREGATE_SETTLE_MS
    const d = await json(fetch(`${t.base}/api/demand`));
    expect(d.total_preflight_checks).toBe(d0.total_preflight_checks + 10);
    const w24 = d.windows[0];
    expect(w24.total_checks).toBe(10);
    expect(w24.verdict_mix.pass).toBe(7);
    expect(w24.verdict_mix.pass + w24.verdict_mix.uncertain + w24.verdict_mix.fail + w24.verdict_mix.unrated).toBe(10);
    expect(w24.servers.find((s: { target: string }) => s.target === GOOD)).toMatchObject({ checks: 7, last_verdict: 'PASS', last_checked_at: clock.toISOString() });
    expect(w24.servers.find((s: { target: string }) => s.target === BAD).checks).toBe(3);
    // All time comes from the per-target sums the trigger keeps (migration 1560, 1580).
    expect(d.windows[3].servers.find((s: { target: string }) => s.target === GOOD).checks).toBe(all0.checks + 7);
    clock = new Date(clock.getTime() + MARKET_FIGURES_MS); // the market figures are counted at most once per MARKET_FIGURES_MS
    const stats = await json(fetch(`${t.base}/api/stats`));
    expect(stats.market_validation.preflight_checks_total).toBe(stats0.market_validation.preflight_checks_total + 10);
    expect(stats.market_validation.preflight_checks_last_24h).toBe(10);
    // The table grows with claims, not calls: the seven checks are one row counting seven.
    const rows = await t.obs.db.query<{ checks: number }>('SELECT checks FROM preflight_demand WHERE receipt_id = $1', [[...goodIds][0]]);
    expect(rows.map((r) => r.checks)).toEqual([7]);
  });

  it('serves Preflight, GetDemand, GetReceipt and Verify over Connect and gRPC', async () => {
    for (const transport of [createGrpcTransport({ baseUrl: t.base }), createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' })]) {
      const trust = createClient(TrustService, transport);
      const receipts = createClient(ReceiptService, transport);
      const pf = await trust.preflight({ target: 'good-example-com-mcp' });
      expect(pf).toMatchObject({ serverUrl: GOOD, verdict: 'PASS', tracked: true });
      const r = await receipts.getReceipt({ receiptId: pf.receiptId });
      expect(r.verification?.valid).toBe(true);
      expect(r.jws).toBe(pf.diligenceReceipt);
      const v = await receipts.verify({ jws: pf.diligenceReceipt });
      expect(v.valid).toBe(true);
      expect(v.payload?.jti).toBe(pf.receiptId);
      expect((await trust.getDemand({})).totalPreflightChecks).toBeGreaterThan(0);
      await expect(trust.preflight({ target: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(receipts.getReceipt({ receiptId: 'nope' })).rejects.toMatchObject({ code: Code.InvalidArgument });
      await expect(receipts.getReceipt({ receiptId: 'ffffffffffffffff' })).rejects.toMatchObject({ code: Code.NotFound });
      await expect(receipts.verify({ jws: 'a.b.c' })).rejects.toMatchObject({ code: Code.InvalidArgument });
    }
  });

  it('lets the gateway and agent-query reuse the pre-flight with their own receipt kind', async () => {
    const r = await t.obs.services.preflight.preflight({ target: GOOD }, undefined, { kind: 'gateway', claim: { decision: 'allow', verdict: 'FORGED' } });
    expect(r.verdict).toBe('PASS');
    const stored = await json(fetch(`${t.base}/v1/receipt/${r.receiptId}`));
    expect(stored.kind).toBe('gateway');
    expect(stored.claim).toMatchObject({ kind: 'gateway', decision: 'allow', verdict: 'PASS' });
  });
});

const decode = (jws: string) => JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString());

describe(`behavioral evidence (${backend})`, () => {
  it('summarises real metrics for a tracked server and signs the document', async () => {
    const res = await fetch(`${t.base}/v1/behavioral-evidence?url=${q(EVIDENCE_URL)}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    const trust = await json(fetch(`${t.base}/api/trust?url=${q(EVIDENCE_URL)}`));
    expect(body).toMatchObject({
      schema: 'mcp-behavioral-evidence-v1.0',
      server_url: EVIDENCE_URL,
      observed_at: now().toISOString(),
      observer: t.config.publicBaseUrl,
      found: true,
      trust_score: trust.server.trust_score,
      verdict: trust.verdict,
    });
    const s = body.behavioral_summary;
    expect(s.total_interactions).toBe(100);
    expect(s.success_rate).toBeCloseTo(0.9);
    expect(s.avg_latency_ms).toBeCloseTo(50.5);
    // p95 is the benchmark's (latency-histogram rollups: an upper bin edge near the exact 95.05 ms).
    const bench = await json(fetch(`${t.base}/benchmark/${trust.server.slug}`));
    expect(s.p95_latency_ms).toBe(bench.latency.p95_ms);
    expect(s.p95_latency_ms).toBeGreaterThanOrEqual(90);
    expect(s.p95_latency_ms).toBeLessThanOrEqual(150);
    expect(s.last_observed).toBe(T0.toISOString());
    expect(s.category).toBe(trust.server.category);
    expect(s.anomaly_flags).toEqual(trust.anomaly.anomaly_flags);
    // The attestation is this document, signed; it verifies at /v1/verify.
    const v = await json(fetch(`${t.base}/v1/verify?jws=${body.attestation}`));
    expect(v.valid).toBe(true);
    expect(v.payload).toMatchObject({ kind: 'attestation', sub: EVIDENCE_URL, schema: body.schema, trust_score: body.trust_score, behavioral_summary: s });
  });

  it('answers found:false (not an error) for unknown servers, still signed', async () => {
    const res = await fetch(`${t.base}/v1/behavioral-evidence?url=${q('https://nobody.example.com')}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ schema: 'mcp-behavioral-evidence-v1.0', server_url: 'https://nobody.example.com', found: false, trust_score: null, verdict: 'UNRATED' });
    expect(body.behavioral_summary).toMatchObject({ total_interactions: 0, success_rate: null, p95_latency_ms: null, last_observed: null, anomaly_flags: [] });
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
    const doc = await json(fetch(`${t.base}/v1/behavioral-evidence?url=${q(EVIDENCE_URL)}`));
    for (const k of schema.required) expect(doc).toHaveProperty(k);
    for (const k of schema.properties.behavioral_summary.required) expect(doc.behavioral_summary).toHaveProperty(k);
    for (const k of Object.keys(doc)) expect(schema.properties, k).toHaveProperty(k);
  });
});

describe(`ERC-8004 attestation (${backend})`, () => {
  it('attests endpoint health with a 0-100 response, a tag, the evidence URI and its hash, signed and stored', async () => {
    const res = await fetch(`${t.base}/v1/erc8004-attestation?url=${q(EVIDENCE_URL)}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    const trust = await json(fetch(`${t.base}/api/trust?url=${q(EVIDENCE_URL)}`));
    const response = Math.round(trust.server.trust_score);
    expect(body).toMatchObject({
      schema: 'erc8004-attestation-v1.0',
      server_url: EVIDENCE_URL,
      attested_at: now().toISOString(),
      attesting_observer: t.config.publicBaseUrl,
      found: true,
      response,
      endpoint_health_status: endpointHealth(response),
      tag: 'mcp-endpoint-health',
      evidence_uri: `${t.config.publicBaseUrl}/v1/behavioral-evidence?url=${q(EVIDENCE_URL)}`,
      trust_score: trust.server.trust_score,
    });
    expect(body.evidence_hash).toMatch(/^0x[0-9a-f]{64}$/);
    const claim = decode(body.attestation);
    expect(claim).toMatchObject({ kind: 'attestation', jti: body.receipt_id, response, evidence_hash: body.evidence_hash });
    // Anyone can recompute the hash from the signed evidence document.
    expect(`0x${createHash('sha256').update(canonicalJson(claim.evidence)).digest('hex')}`).toBe(body.evidence_hash);
    expect(claim.evidence).toMatchObject({ schema: 'mcp-behavioral-evidence-v1.0', server_url: EVIDENCE_URL, found: true });
    const stored = await json(fetch(`${t.base}/v1/receipt/${body.receipt_id}`));
    expect(stored).toMatchObject({ kind: 'attestation', jws: body.attestation, verification: { valid: true } });
  });

  it('maps the response to health bands at their edges', () => {
    expect([100, 70, 69, 40, 39, 0].map(endpointHealth)).toEqual(['HEALTHY', 'HEALTHY', 'DEGRADED', 'DEGRADED', 'UNHEALTHY', 'UNHEALTHY']);
  });

  it('says UNHEALTHY with response 0 for a server it never observed (found false), still signed', async () => {
    const body = await json(fetch(`${t.base}/v1/erc8004-attestation?url=${q('https://nobody.example.com/mcp')}`));
    expect(body).toMatchObject({ found: false, response: 0, endpoint_health_status: 'UNHEALTHY', trust_score: null });
    expect((await fetch(`${t.base}/v1/verify?jws=${body.attestation}`)).status).toBe(200);
  });

  it('serves both over gRPC', async () => {
    const c = createClient(ReceiptService, createGrpcTransport({ baseUrl: t.base }));
    const ev = await c.getBehavioralEvidence({ url: EVIDENCE_URL });
    expect(ev.found).toBe(true);
    expect(ev.behavioralSummary?.totalInteractions).toBe(100);
    const at = await c.getErc8004Attestation({ url: EVIDENCE_URL });
    expect(at.receiptId).toMatch(/^[0-9a-f]{16}$/);
    await expect(c.getBehavioralEvidence({ url: '' })).rejects.toMatchObject({ code: Code.InvalidArgument });
  });
});
