import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase } from './support/db.js';
import { countingDb } from './support/counting-db.js';
import { startModernMcpTarget } from './support/mcp-target.js';
import { decideTool, type GateToolPolicy } from '../src/domain/tool-gate.js';
import { toolFacts } from '../src/services/gate.js';

// A tools/call for a tool the server's latest recorded manifest does not list (security audit,
// finding 2b). Such a tool has no drift row, so the gate answered with the server's verdict: a
// server that showed the probe one manifest could offer its clients a tool the probe never saw
// (`Mcp-Name: exfiltrate_never_listed` was 200 allow). Now it is denied (`tool_not_in_baseline`)
// unless GATE_UNLISTED_TOOLS=allow, on /v1/gate and the gRPC Check alike.

const readFile: Tool = { name: 'read_file', description: 'Reads a file.', inputSchema: { type: 'object' } };
const writeFile: Tool = { name: 'write_file', description: 'Writes a file.', inputSchema: { type: 'object' } };
const call = (tool: string) => ({ 'mcp-method': 'tools/call', 'mcp-name': tool });

describe('decideTool: a tool the latest manifest does not list', () => {
  const UP = 'https://files.example.com/mcp';
  const pass = { allow: true, reason: 'verdict_pass' };
  const policy: GateToolPolicy = { deny: [], exempt: [], driftWindowMs: 3_600_000 };
  const facts = (listed: boolean | null) => ({ drift: null, evidence: { verdict: 'UNRATED' as const, trustScore: null, reports: 0 }, listed });

  it('is denied by default, judged by the other checks with unlistedTools allow, and unknown without a manifest', () => {
    expect(decideTool(pass, UP, 'x', facts(false), policy).decision).toEqual({ allow: false, reason: 'tool_not_in_baseline' });
    expect(decideTool(pass, UP, 'x', facts(false), { ...policy, unlistedTools: 'deny' }).decision).toEqual({ allow: false, reason: 'tool_not_in_baseline' });
    expect(decideTool(pass, UP, 'x', facts(false), { ...policy, unlistedTools: 'allow' }).decision).toEqual(pass);
    expect(decideTool(pass, UP, 'x', facts(null), policy).decision).toEqual(pass);
    expect(decideTool(pass, UP, 'x', facts(true), policy).decision).toEqual(pass);
    expect(decideTool(pass, UP, 'x', facts(false), policy).finding).toMatchObject({ name: 'x', listed: false });
  });

  it('comes after GATE_TOOLS_DENY and GATE_TOOLS_EXEMPT, and never widens a server denial', () => {
    const fail = { allow: false, reason: 'verdict_fail' };
    expect(decideTool(fail, UP, 'x', facts(false), policy).decision).toEqual(fail);
    expect(decideTool(pass, UP, 'x', facts(false), { ...policy, deny: [{ upstream: null, name: 'x' }] }).decision).toEqual({ allow: false, reason: 'policy_denies_tool' });
    expect(decideTool(pass, UP, 'x', facts(false), { ...policy, exempt: [{ upstream: UP, name: 'x' }] }).decision).toEqual(pass);
  });
});

describe(`the gate and a tool the latest manifest does not list (${backend})`, () => {
  let t: TestApp;
  let lenient: TestApp;
  let target: Awaited<ReturnType<typeof startModernMcpTarget>>;
  const NEVER_PROBED = 'https://never-probed.example.com/mcp';

  beforeAll(async () => {
    target = await startModernMcpTarget([readFile, writeFile]);
    const tdb = await createTestDatabase();
    // Two gates over one database: the default (deny) and GATE_UNLISTED_TOOLS=allow.
    t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', GATE_CACHE_SECONDS: '0' }, { tdb });
    lenient = await startTestApp({ GATE_UNLISTED_TOOLS: 'allow', GATE_CACHE_SECONDS: '0' }, { tdb });
    for (const url of [target.url, NEVER_PROBED]) expect((await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 5 })).status).toBe(200);
    expect((await json(fetch(`${t.base}/api/drift?server=${encodeURIComponent(target.url)}`))).tool_count).toBe(2);
  }, 120_000);
  afterAll(async () => {
    await target?.close();
    await lenient?.close();
    await t?.close();
    await t?.tdb.drop();
  });

  const gate = (app: TestApp, server: string, headers: Record<string, string>) => fetch(`${app.base}/v1/gate`, { headers: { 'x-mcp-server': server, ...headers } });

  it('/v1/gate denies it with 403 tool_not_in_baseline, signed; listed tools and other methods pass', async () => {
    const res = await gate(t, target.url, call('exfiltrate_never_listed'));
    const receipt = res.headers.get('x-trust-receipt');
    const body = await expectProblem(res, 403, 'forbidden');
    expect(body).toMatchObject({ allow: false, reason: 'tool_not_in_baseline', tool_name: 'exfiltrate_never_listed', tool: { name: 'exfiltrate_never_listed', listed: false, drift: null } });
    expect(String(body.detail)).toContain('"exfiltrate_never_listed"');
    expect(String(body.detail)).toContain('tool_not_in_baseline');
    const claim = (await json(fetch(`${t.base}/v1/receipt/${receipt}`))).claim;
    expect(claim.gateway).toMatchObject({ decision: 'deny', reason: 'tool_not_in_baseline', tool: { listed: false } });
    const listed = await gate(t, target.url, call('read_file'));
    expect(listed.status).toBe(200);
    expect(await json(listed)).toMatchObject({ allow: true, tool: { name: 'read_file', listed: true } });
    expect((await gate(t, target.url, { 'mcp-method': 'tools/list' })).status).toBe(200);
    expect((await gate(t, target.url, {})).status).toBe(200);
  });

  it('the gRPC ext_authz Check denies it the same way', async () => {
    const client = createClient(Authorization, createGrpcTransport({ baseUrl: t.base }));
    const check = (tool: string) =>
      client.check({ attributes: { request: { http: { method: 'POST', headers: call(tool), host: 'gw.example', path: '/mcp', scheme: 'https' } }, contextExtensions: { mcp_server: target.url } } });
    const denied = await check('exfiltrate_never_listed');
    expect(denied.status?.code).toBe(7);
    expect(denied.status?.message).toContain('"exfiltrate_never_listed"');
    expect(denied.dynamicMetadata).toMatchObject({ decision: 'deny', reason: 'tool_not_in_baseline', mcp_tool: 'exfiltrate_never_listed' });
    expect((await check('write_file')).dynamicMetadata).toMatchObject({ decision: 'allow', mcp_tool: 'write_file' });
  });

  it('follows the latest manifest: a removed tool is denied, one listed again passes', async () => {
    target.setTools([readFile]);
    expect((await json(fetch(`${t.base}/api/drift?server=${encodeURIComponent(target.url)}`))).tools_removed).toEqual(['write_file']);
    expect(await expectProblem(await gate(t, target.url, call('write_file')), 403, 'forbidden')).toMatchObject({ reason: 'tool_not_in_baseline' });
    target.setTools([readFile, writeFile]);
    expect((await json(fetch(`${t.base}/api/drift?server=${encodeURIComponent(target.url)}`))).tools_added).toEqual(['write_file']);
    // Listed again, it is an added tool: the drift rule takes it from here.
    expect(await expectProblem(await gate(t, target.url, call('write_file')), 403, 'forbidden')).toMatchObject({ reason: 'tool_drift', tool: { listed: true } });
  }, 60_000);

  it('costs no statement of its own on the gate\'s path: the manifest hash comes with the drift row, its names once per manifest', async () => {
    const [row] = await t.obs.db.query<{ id: string }>('SELECT id FROM servers WHERE url = $1', [target.url]);
    // A handle of its own: the names of this manifest are not in memory for it yet.
    const counter = countingDb(t.tdb.db);
    const at = new Date();
    const first = await counter.during(async () => expect((await toolFacts(counter.db, Number(row!.id), 'read_file', at, 3_600_000)).listed).toBe(true));
    const next = await counter.during(async () => expect((await toolFacts(counter.db, Number(row!.id), 'not_listed', at, 3_600_000)).listed).toBe(false));
    // The tool's drift row with the latest manifest hash, and its evidence; the manifest's names the first time only.
    expect(first).toHaveLength(3);
    expect(first.filter((s) => s.includes('b.manifest_hash, c.recorded_at'))).toHaveLength(1);
    expect(next).toHaveLength(2);
  });

  it('a server with no recorded manifest keeps the server\'s answer; GATE_UNLISTED_TOOLS=allow lets unlisted tools through', async () => {
    expect(await json(gate(t, NEVER_PROBED, call('anything')))).toMatchObject({ allow: true, tool: { name: 'anything', listed: null } });
    const allowed = await gate(lenient, target.url, call('exfiltrate_never_listed'));
    expect(allowed.status).toBe(200);
    expect(await json(allowed)).toMatchObject({ allow: true, tool: { listed: false } });
  });
});
