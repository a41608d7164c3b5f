import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answerEmptyResult } from './support/mcp-target.js';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { emptyHistogram, LATENCY_BIN_EDGES, latencyBin, latencyP95 } from '../src/domain/latency-histogram.js';
import { evidenceStore } from '../src/store/evidence.js';
import { paymentStore } from '../src/store/payments.js';
import { serverStore } from '../src/store/servers.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Spec drift found by real clients (issue 17, "Also from real clients"): each test here failed on
// main. Untracked behavioral evidence carries a summary object, ERC-8004 answers only the decided
// health states, /api/stats fills market_validation, an empty ?server= on /api/sla-tier is the
// distribution, /v1/compliance never puts an HTTP code in a control's status, and every p95 is
// one definition (latencyP95) over the same reports.

let t: TestApp;
let site: http.Server;
let siteBase: string;
const q = encodeURIComponent;

beforeAll(async () => {
  // A local MCP-ish endpoint for the compliance probes: every JSON-RPC request is answered 200 with
  // an empty result under its own id (a wrong id would leave the probe's MCP client waiting out
  // its 8 s deadline), did.json and the RFC 9728 metadata are missing (404).
  site = http.createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/mcp') return void answerEmptyResult(req, res);
    res.writeHead(404, { 'content-type': 'text/html' }).end('<html>not found</html>');
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
  siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', TRUST_PROXY: '1' });
}, 120_000);
afterAll(async () => {
  site?.closeAllConnections();
  await new Promise((r) => site?.close(r));
  await t?.close();
});

const report = (server_url: string, latency_ms: number, tool_name = 'read_chart') =>
  postJson(`${t.base}/api/report`, { server_url, success: true, latency_ms, tool_name }, { 'x-forwarded-for': '198.51.100.7' });

describe(`untracked servers (${backend})`, () => {
  it('/v1/behavioral-evidence: found false, behavioral_summary an object without figures, valid against its JSON Schema', async () => {
    const url = 'https://never-seen.example.com/mcp';
    const res = await fetch(`${t.base}/v1/behavioral-evidence?url=${q(url)}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ schema: 'mcp-behavioral-evidence-v1.0', server_url: url, found: false, trust_score: null, verdict: 'UNRATED' });
    expect(body.behavioral_summary).toEqual({
      total_interactions: 0,
      success_rate: null,
      avg_latency_ms: null,
      p95_latency_ms: null,
      last_observed: null,
      category: expect.any(String),
      anomaly_flags: [],
    });
    const schema = await json(fetch(`${t.base}/schemas/mcp-behavioral-evidence-v1.0.json`));
    for (const k of schema.required) expect(body).toHaveProperty(k);
    expect(schema.properties.behavioral_summary.type).toBe('object');
    for (const k of schema.properties.behavioral_summary.required) expect(body.behavioral_summary).toHaveProperty(k);
    // The signed form carries the same summary.
    const payload = JSON.parse(Buffer.from(body.attestation.split('.')[1], 'base64url').toString());
    expect(payload.behavioral_summary).toEqual(body.behavioral_summary);
  });

  it('/v1/erc8004-attestation: only the decided states; no evidence is response 0, UNHEALTHY, found false', async () => {
    const url = 'https://never-seen-either.example.com/mcp';
    const body = await json(fetch(`${t.base}/v1/erc8004-attestation?url=${q(url)}`));
    expect(body).toMatchObject({ found: false, response: 0, endpoint_health_status: 'UNHEALTHY', trust_score: null });
    expect((await fetch(`${t.base}/v1/verify?jws=${body.attestation}`)).status).toBe(200);
    const claim = JSON.parse(Buffer.from(body.attestation.split('.')[1], 'base64url').toString());
    expect(claim).toMatchObject({ endpoint_health_status: 'UNHEALTHY', response: 0, found: false });
    expect(claim.evidence.behavioral_summary.total_interactions).toBe(0);
  });
});

describe(`GET /api/sla-tier (${backend})`, () => {
  it('an empty ?server= is the distribution, as with no parameter (REST and Connect)', async () => {
    const none = await json(fetch(`${t.base}/api/sla-tier`));
    for (const qs of ['?server=', '?server=%20']) {
      const res = await fetch(`${t.base}/api/sla-tier${qs}`);
      expect(res.status, qs).toBe(200);
      const b = await json(res);
      expect(b).toMatchObject({ schema: 'mcp-sla-tier-certification-v1.0', distribution: none.distribution, criteria: none.criteria });
      expect(b.server_url).toBeNull();
    }
    const c = await createClient(TrustService, createGrpcTransport({ baseUrl: t.base })).getSlaTier({ server: '' });
    expect(c.distribution).toBeDefined();
    await expectProblem(await fetch(`${t.base}/api/sla-tier?server=${q('https://not-tracked.example.com')}`), 404, 'not_tracked');
  });
});

describe(`GET /v1/compliance (${backend})`, () => {
  it("keeps each control's status pass/fail/self_attestation_required; the probe's HTTP status is evidence", async () => {
    const a = await json(fetch(`${t.base}/v1/compliance?server=${q(`${siteBase}/mcp`)}`));
    const controls = a.dimensions.flatMap((d: { evidence: Record<string, Record<string, unknown>> }) => Object.entries(d.evidence));
    expect(controls.length).toBe(9);
    for (const [id, ev] of controls as [string, Record<string, unknown>][]) expect(['pass', 'fail', 'self_attestation_required'], id).toContain(ev.status);
    const byId = Object.fromEntries(controls) as Record<string, Record<string, unknown>>;
    expect(byId.provenance_did_document).toMatchObject({ status: 'fail', http_status: 404, found: false });
    expect(byId.auth_protected_resource_metadata).toMatchObject({ status: 'fail', http_status: 404, found: false });
    expect(byId.auth_challenge).toMatchObject({ status: 'fail', http_status: 200 });
    for (const d of a.dimensions) expect(['PASS', 'FAIL', 'PARTIAL']).toContain(d.result);
    // The checklist says the same about the same evidence.
    const c = await json(fetch(`${t.base}/api/agency-checklist?url=${q(`${siteBase}/mcp`)}`));
    const did = c.controls.find((x: { id: string }) => x.id === 'provenance_did_document');
    expect(did).toMatchObject({ status: 'fail', evidence: { http_status: 404 } });
    expect(did.evidence).not.toHaveProperty('status');
  });
});

describe(`one p95 for the same reports (${backend})`, () => {
  // A category of its own (health), so its baseline is built from this server's reports alone.
  const URL_P95 = 'https://p95-clinic.example.com/health-records';
  const latencies = Array.from({ length: 100 }, (_, i) => i + 1);

  it('benchmark, behavioral evidence, ERC-8004 evidence, the category baseline and /api/compliance agree', async () => {
    for (const ms of latencies) expect((await report(URL_P95, ms)).status).toBe(200);
    const hist = emptyHistogram();
    for (const ms of latencies) hist[latencyBin(ms)]!++;
    const expected = latencyP95(hist);
    expect(expected).not.toBeNull();

    const trust = await json(fetch(`${t.base}/api/trust?url=${q(URL_P95)}`));
    expect(trust.server.category).toBe('health');
    const bench = await json(fetch(`${t.base}/benchmark/${trust.server.slug}`));
    const evidence = await json(fetch(`${t.base}/v1/behavioral-evidence?url=${q(URL_P95)}`));
    const erc = await json(fetch(`${t.base}/v1/erc8004-attestation?url=${q(URL_P95)}`));
    const ercEvidence = JSON.parse(Buffer.from(erc.attestation.split('.')[1], 'base64url').toString()).evidence;
    const exportDoc = await json(fetch(`${t.base}/api/compliance?server_url=${q(URL_P95)}`));
    expect(exportDoc.events.total_events).toBe(100);
    expect({
      benchmark: bench.latency.p95_ms,
      behavioral_evidence: evidence.behavioral_summary.p95_latency_ms,
      erc8004_evidence: ercEvidence.behavioral_summary.p95_latency_ms,
      category_baseline: trust.category_baseline.p95_latency_ms,
      compliance_export: exportDoc.events.p95_latency_ms,
      service: await t.obs.services.trust.p95LatencyFor((await serverStore(t.obs.db).byUrl(URL_P95))!),
    }).toEqual({
      benchmark: expected,
      behavioral_evidence: expected,
      erc8004_evidence: expected,
      category_baseline: expected,
      compliance_export: expected,
      service: expected,
    });
  });

  it("the export's period histogram bins latencies exactly as the rollups do, edges included", async () => {
    const url = 'https://p95-edges.example.com/mcp';
    const values = [0, 0.5, 4.999, ...LATENCY_BIN_EDGES, ...LATENCY_BIN_EDGES.map((e) => e - 0.001), 3_600_000];
    for (const ms of values) expect((await report(url, ms)).status).toBe(200);
    const server = (await serverStore(t.obs.db).byUrl(url))!;
    const ev = await evidenceStore(t.obs.db).events(server.id, new Date(Date.now() - 3_600_000), new Date(Date.now() + 3_600_000));
    const hist = emptyHistogram();
    for (const ms of values) hist[latencyBin(ms)]!++;
    expect(ev.latency_hist).toEqual(hist);
  });
});

describe(`GET /api/stats market_validation (${backend})`, () => {
  it('counts real demand: pre-flight checks, vetted servers, keys, verdicts served, receipts', async () => {
    const A = 'https://market-a.example.com/mcp';
    const B = 'https://market-b.example.com/mcp';
    expect((await report(A, 20)).status).toBe(200);
    expect((await report(B, 30)).status).toBe(200);
    for (const target of [A, A, B, 'https://market-unknown.example.com/mcp']) expect((await fetch(`${t.base}/v1/preflight?target=${q(target)}`)).status).toBe(200);
    const reg = await json(postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': '203.0.113.9' }));
    const slug = (await json(fetch(`${t.base}/api/trust?url=${q(A)}`))).server.slug;
    expect((await fetch(`${t.base}/agent-query/${slug}`, { headers: { authorization: `Bearer ${reg.api_key}` } })).status).toBe(200);

    // Two x402 payments were claimed; one bought its verdict (receipt attached), one did not.
    const payments = paymentStore(t.obs.db);
    const [bought, abandoned] = [`0x${'a'.repeat(64)}`, `0x${'b'.repeat(64)}`];
    for (const tx of [bought, abandoned]) {
      expect(await payments.claim({ txHash: tx, payer: `0x${'3'.repeat(40)}`, units: 1000n, blockNumber: 1n, serverUrl: A, at: new Date() })).toBe(true);
    }
    await payments.attachReceipt(bought, (await json(fetch(`${t.base}/v1/preflight?target=${q(A)}`))).receipt_id);

    const [{ receipts }] = (await t.obs.db.query<{ receipts: number }>('SELECT count(*)::int8 AS receipts FROM receipts')) as [{ receipts: number }];
    const stats = await json(fetch(`${t.base}/api/stats`));
    const m = stats.market_validation;
    expect(m).not.toBeNull();
    expect(m).toMatchObject({
      // 5 pre-flights and the agent-query's own pre-flight, all within the last 24 hours.
      preflight_checks_total: 6,
      preflight_checks_last_24h: 6,
      unique_preflight_targets: 3,
      tracked_servers_vetted: 2,
      gateway_decisions: 0,
      agent_keys_issued: 1,
      agent_queries_served: 1,
      paid_verdicts: 1,
      receipts_issued: Number(receipts),
    });
    // One receipt per claim within a second (issue 22): A, B, the unknown target and the agent-query's
    // own check state four claims; the two back-to-back checks of A may share one receipt.
    expect(m.receipts_issued).toBeGreaterThanOrEqual(4);
    expect(m.vetted_share).toBeCloseTo(2 / stats.total_servers_tracked, 4);
    expect(Date.parse(m.computed_at)).not.toBeNaN();
  });
});
