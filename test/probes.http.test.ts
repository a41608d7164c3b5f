import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answerEmptyResult } from './support/mcp-target.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// A local site on 127.0.0.1 serving whatever documents a test puts in `docs`.
let docs: Record<string, { status?: number; type?: string; body: string; headers?: Record<string, string> }> = {};
/** A document that answers each JSON-RPC request 200 with an empty result under its id (answerEmptyResult). */
const EMPTY_RESULTS = { body: '' };
let site: http.Server;
let siteBase: string;
let t: TestApp; // ALLOW_PRIVATE_TARGETS=1

beforeAll(async () => {
  site = http.createServer((req, res) => {
    const d = docs[`${req.method} ${(req.url ?? '/').split('?')[0]}`] ?? docs[(req.url ?? '/').split('?')[0]!];
    if (!d) return void res.writeHead(404, { 'content-type': 'text/html' }).end('<html>not found</html>');
    if (d === EMPTY_RESULTS) return void answerEmptyResult(req, res);
    res.writeHead(d.status ?? 200, { 'content-type': d.type ?? 'application/json', ...(d.headers ?? {}) }).end(d.body);
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
  siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
});
afterAll(async () => {
  site.closeAllConnections();
  await new Promise((r) => site.close(r));
  await t?.close();
});

const q = (base: string, path: string, params: Record<string, string>) => fetch(`${base}${path}?${new URLSearchParams(params)}`);

const fullSite = () => ({
  '/robots.txt': { type: 'text/plain', body: 'User-agent: *\nAllow: /\n' },
  '/llms.txt': { type: 'text/plain', body: '# Example\n\n> A site for agents.\n\n- [API](/openapi.json)\n' },
  '/openapi.json': {
    body: JSON.stringify({
      openapi: '3.1.0',
      info: { title: 'x', version: '1.0.0', contact: { email: 'ops@example.com' }, license: { name: 'MIT' } },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      paths: {
        '/items': {
          get: { operationId: 'listItems', summary: 'List', parameters: [{ name: 'q', in: 'query', schema: { type: 'string' } }], responses: { '200': { content: { 'application/json': { schema: {} } } } } },
          post: { operationId: 'buyItem', summary: 'Buy', responses: { '200': { content: {} }, '402': { description: 'pay first' } } },
        },
      },
    }),
  },
  '/.well-known/mcp.json': { body: JSON.stringify({ endpoint: `${siteBase}/mcp` }) },
  '/.well-known/agent-card.json': {
    body: JSON.stringify({ name: 'x', url: `${siteBase}/a2a`, version: '1.0.0', provider: { organization: 'Example' }, skills: [{ id: 's', name: 's', description: 'does s' }], securitySchemes: { bearer: {} } }),
  },
});

describe(`GET /api/agent-readiness (${backend})`, () => {
  it('400 for a missing or invalid url', async () => {
    await expectProblem(await fetch(`${t.base}/api/agent-readiness`), 400, 'invalid_argument');
    for (const url of ['not a url', 'ftp://x.example', 'https://u:p@x.example', 'x'.repeat(3000)]) await expectProblem(await q(t.base, '/api/agent-readiness', { url }), 400);
  });

  it('scores a site with every surface at the top and explains each point', async () => {
    docs = fullSite();
    const b = await json(q(t.base, '/api/agent-readiness', { url: `${siteBase}/some/page` }));
    expect(b.url).toBe(siteBase);
    expect(b.detected_surfaces).toEqual(['robots.txt', 'llms.txt', 'openapi.json', 'mcp.json', 'agent-card.json']);
    expect(b.missing_surfaces).toEqual([]);
    expect(b.discoverability_score).toBe(100);
    expect(b.comprehension_score).toBe(100);
    expect(b.usability_score).toBe(100);
    expect(b.transactability_score).toBe(100);
    expect(b.trustability_score).toBe(80); // plain http: the HTTPS points are withheld
    expect(b.score).toBe(96);
    const https = b.reasons.trustability.find((r: { check: string }) => r.check === 'https');
    expect(https).toMatchObject({ points: 0, max_points: 20 });
    expect(b.recommended_next_action).toMatch(/HTTPS/);
    expect(b.probes).toHaveLength(5);
  });

  it('scores a bare site low, says what is missing, and does not count HTML 200 pages', async () => {
    docs = { '/robots.txt': { type: 'text/plain', body: 'User-agent: *\nDisallow: /\n' }, '/llms.txt': { type: 'text/html', body: '<!doctype html><p>spa</p>' } };
    const b = await json(q(t.base, '/api/agent-readiness', { url: siteBase }));
    expect(b.detected_surfaces).toEqual(['robots.txt']);
    expect(b.missing_surfaces).toEqual(['llms.txt', 'openapi.json', 'mcp.json', 'mcp/server-card.json', 'agent-card.json', 'agent.json']);
    expect(b.discoverability_score).toBe(15);
    expect(b.usability_score).toBe(0);
    expect(b.score).toBeLessThan(10);
    const rb = b.reasons.discoverability.find((r: { check: string }) => r.check === 'robots_allows_agents');
    expect(rb.points).toBe(0);
    expect(b.probes.find((p: { path: string }) => p.path === '/llms.txt')).toEqual({ path: '/llms.txt', found: false, http_status: 200 });
  });

  it('a document nesting deeper than 64 levels counts as missing, saying so; NUL and lone surrogates in one are no error', async () => {
    const deep = `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`;
    docs = { ...fullSite(), '/openapi.json': { body: deep }, '/.well-known/agent-card.json': { body: '{"name":"x\\u0000y","url":"https://a.example/a2a","version":"1\\ud800","skills":[]}' } };
    const b = await json(q(t.base, '/api/agent-readiness', { url: siteBase }));
    expect(b.missing_surfaces).toContain('openapi.json');
    expect(b.detected_surfaces).toContain('agent-card.json');
    expect(b.probes.find((p: { path: string }) => p.path === '/openapi.json')).toMatchObject({ found: false, http_status: 200 });
  });

  it('answers 502 when nothing answers at all', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    await expectProblem(await q(t.base, '/api/agent-readiness', { url: `http://127.0.0.1:${port}` }), 502, 'upstream_error');
  });

  it('our own service, probed by itself, scores at the top', async (ctx) => {
    const missing = [];
    for (const p of ['/llms.txt', '/.well-known/agent-card.json']) if ((await fetch(`${t.base}${p}`)).status !== 200) missing.push(p);
    if (missing.length > 0) {
      console.log(`skipped: our own ${missing.join(' and ')} not served yet; this test activates once they exist`);
      ctx.skip();
    }
    const b = await json(q(t.base, '/api/agent-readiness', { url: t.base }));
    expect(b.score).toBeGreaterThanOrEqual(90);
    for (const d of ['discoverability', 'comprehension', 'usability', 'trustability', 'transactability']) expect(b[`${d}_score`], d).toBeGreaterThanOrEqual(80);
  });
});

describe(`agency checklist and compliance attestation (${backend})`, () => {
  it('400 for missing/invalid url, server or standard', async () => {
    await expectProblem(await fetch(`${t.base}/api/agency-checklist`), 400, 'invalid_argument');
    await expectProblem(await q(t.base, '/api/agency-checklist', { url: 'nope' }), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/compliance`), 400, 'invalid_argument');
    await expectProblem(await q(t.base, '/v1/compliance', { server: `${siteBase}/mcp`, standard: 'iso-27001' }), 400, 'invalid_argument');
  });

  it('reports per-control evidence for an open http server and fails the gate', async () => {
    docs = { 'POST /mcp': EMPTY_RESULTS };
    const b = await json(q(t.base, '/api/agency-checklist', { url: `${siteBase}/mcp` }));
    expect(b.standard).toBe('agency-mcp-2026');
    expect(b.notice).toMatch(/not affiliated with.*any government agency/i);
    const byId = Object.fromEntries(b.controls.map((c: { id: string }) => [c.id, c]));
    expect(byId.transport_tls).toMatchObject({ status: 'fail', category: 'transport' });
    expect(byId.transport_tls.evidence.scheme).toBe('http');
    expect(byId.auth_challenge.status).toBe('fail');
    expect(byId.auth_challenge.evidence.http_status).toBe(200);
    expect(byId.rate_limit_signals.status).toBe('self_attestation_required');
    expect(byId.audit_telemetry_history.evidence.tracked).toBe(false);
    expect(byId.audit_operator_logs.status).toBe('self_attestation_required');
    expect(byId.provenance_did_document.status).toBe('fail');
    expect(b.compliance_summary).toEqual({ total_controls: 9, passed: 0, failed: 7, self_attestation_required: 2, pass_rate: 0 });

    const a = await json(q(t.base, '/v1/compliance', { server: `${siteBase}/mcp` }));
    expect(a.overall_result).toBe('FAIL');
    expect(a.ci.exit_code).toBe(1);
    expect(a.dimensions.map((d: { dimension: string }) => d.dimension)).toEqual(['transport', 'auth', 'rate_limit', 'audit_trail', 'provenance']);
    expect(a.dimensions.find((d: { dimension: string }) => d.dimension === 'rate_limit').result).toBe('PARTIAL');
    const v = await t.obs.services.receipts.verify(a.receipt);
    expect(v.valid).toBe(true);
    if (v.valid) expect(v.payload).toMatchObject({ kind: 'compliance', sub: `${siteBase}/mcp`, overall_result: 'FAIL', exit_code: 1, jti: a.receipt_id });
  });

  it('sees auth challenges, RFC 9728 metadata, rate-limit headers and did.json (PARTIAL over http)', async () => {
    const host = new URL(siteBase).host;
    docs = {
      'POST /mcp': { status: 401, body: '{}', headers: { 'www-authenticate': `Bearer resource_metadata="${siteBase}/.well-known/oauth-protected-resource/mcp"`, 'ratelimit-policy': '100;w=60' } },
      '/.well-known/oauth-protected-resource/mcp': { body: JSON.stringify({ resource: `${siteBase}/mcp`, authorization_servers: ['https://auth.example.com'] }) },
      '/.well-known/did.json': { body: JSON.stringify({ id: `did:web:${host.replace(':', '%3A')}`, verificationMethod: [{ id: '#k' }] }) },
    };
    const b = await json(q(t.base, '/api/agency-checklist', { url: `${siteBase}/mcp` }));
    const byId = Object.fromEntries(b.controls.map((c: { id: string; status: string }) => [c.id, c.status]));
    expect(byId).toMatchObject({ auth_challenge: 'pass', auth_protected_resource_metadata: 'pass', rate_limit_signals: 'pass', provenance_did_document: 'pass', transport_tls: 'fail' });
    const a = await json(q(t.base, '/v1/compliance', { server: `${siteBase}/mcp`, standard: 'agency-mcp-2026' }));
    const dims = Object.fromEntries(a.dimensions.map((d: { dimension: string; result: string }) => [d.dimension, d.result]));
    expect(dims).toEqual({ transport: 'FAIL', auth: 'PASS', rate_limit: 'PASS', audit_trail: 'FAIL', provenance: 'PARTIAL' });
    expect(a.ci.exit_code).toBe(1);
    // Over Connect as well.
    const c = await json(postJson(`${t.base}/observatory.v1.ComplianceService/GetAgencyChecklist`, { url: `${siteBase}/mcp` }));
    expect(c.controls).toHaveLength(9);
  });
});

describe(`GET /api/compliance governance export (${backend})`, () => {
  it('400 for a missing server_url, bad dates or an inverted range', async () => {
    await expectProblem(await fetch(`${t.base}/api/compliance`), 400, 'invalid_argument');
    const s = 'https://export.example.com/mcp';
    for (const params of <Record<string, string>[]>[
      { start_date: '2026-13-01' },
      { start_date: '2026-02-30' },
      { end_date: 'yesterday' },
      { start_date: '2026-03-10', end_date: '2026-03-01' },
      { format: 'xml' },
    ]) await expectProblem(await q(t.base, '/api/compliance', { server_url: s, ...params }), 400, 'invalid_argument');
  });

  it('exports the logged evidence with the Article 12 and Singapore mapping, as JSON and CSV', async () => {
    const s = 'https://export.example.com/mcp';
    await postJson(`${t.base}/api/report`, { server_url: s, success: true, latency_ms: 100, tool_name: 'search' });
    await postJson(`${t.base}/api/report`, { server_url: s, success: false, latency_ms: 300, tool_name: '=cmd|calc' });
    const today = new Date().toISOString().slice(0, 10);
    const b = await json(q(t.base, '/api/compliance', { server_url: s, agent_id: 'agent-7', start_date: '2020-01-01', end_date: today }));
    expect(b).toMatchObject({ schema: 'mcp-compliance-export-v1.0', server_url: s, agent_id: 'agent-7', period: { start_date: '2020-01-01', end_date: today } });
    expect(b.events).toMatchObject({ total_events: 2, successful: 1, failed: 1, success_rate: 0.5, avg_latency_ms: 200 });
    expect(b.events.by_tool).toHaveLength(2);
    expect(b.mappings.some((m: { reference: string }) => m.reference === 'Article 12(3)(a)')).toBe(true);
    expect(b.mappings.some((m: { framework: string }) => /Singapore/.test(m.framework))).toBe(true);
    expect(b.data_collected).toEqual(['server_url', 'success', 'latency_ms', 'tool_name', 'http_status']);
    // A past window holds nothing.
    const empty = await json(q(t.base, '/api/compliance', { server_url: s, start_date: '2020-01-01', end_date: '2020-01-31' }));
    expect(empty.events.total_events).toBe(0);
    expect(empty.events.success_rate).toBeNull();

    for (const res of [await q(t.base, '/api/compliance', { server_url: s, format: 'csv' }), await fetch(`${t.base}/api/compliance?server_url=${encodeURIComponent(s)}`, { headers: { accept: 'text/csv' } })]) {
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/csv/);
      expect(res.headers.get('content-disposition')).toMatch(/attachment; filename="compliance-.*\.csv"/);
      const csv = await res.text();
      expect(csv.split('\r\n')[0]).toBe('"section","key","value","detail"');
      expect(csv).toContain('"events","total_events","2",""');
      expect(csv).toContain(`"'=cmd|calc"`); // formula neutralised
    }
  });

  it('lists drift anomalies and receipts of the period', async () => {
    const s = `${siteBase}/mcp`;
    const today = new Date().toISOString().slice(0, 10);
    const b = await json(q(t.base, '/api/compliance', { server_url: s, end_date: today }));
    expect(b.receipts.length).toBeGreaterThanOrEqual(2); // the compliance attestations above
    expect(b.receipts.every((r: { kind: string }) => r.kind === 'compliance')).toBe(true);
    expect(b.name).toBeNull();
    expect(b.verdict).toBe('UNRATED');
  });
});
