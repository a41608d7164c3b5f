import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DescMethod, DescService } from '@bufbuild/protobuf';
import { AccessService } from '../gen/observatory/v1/access_pb.js';
import { ComplianceService } from '../gen/observatory/v1/compliance_pb.js';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { TraceService } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { MetricsService } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { Health } from '../gen/grpc/health/v1/health_pb.js';
import * as reflectionV1 from '../gen/grpc/reflection/v1/reflection_pb.js';
import * as reflectionV1alpha from '../gen/grpc/reflection/v1alpha/reflection_pb.js';
import { registeredRoutes } from '../src/http/problem.js';
import { PROBING_PAGES, SEARCH_RATE_LIMITED } from '../src/http/rate-limit.js';
import { A2A_SKILLS } from '../src/agents/a2a-card.js';
import { startModernMcpTarget } from './support/mcp-target.js';
import { recordedSkill, startClawHub, type ClawHubStandIn } from './support/clawhub.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// The class of finding 1 (2026-11-28): a call that signs AND stores a receipt (a row kept
// RECEIPT_RETENTION_DAYS) without a rate limit. GET /v1/erc8004-attestation stored one per call
// for any url= anyone made up, and no limit table named it. This test finds the writers itself:
// it calls EVERY route of fastify's route table (every method, HEAD included), every Connect
// method the router serves, every MCP tool and every A2A skill, once with seeded input (a real
// MCP server on 127.0.0.1, so the probes succeed and sign) and once with a URL nobody used (so a
// receipt shared per claim cannot hide a writer), counting the rows of `receipts` around each
// call. Every call that stored a row must then be refused within the quota from one client
// network: a new route or method that stores receipts without a limit fails here. A route or
// method this test cannot call (no sample for a required parameter, a POST without a sample body,
// a streaming method nobody reviewed) fails it too.

const QUOTA = 3;
let t: TestApp;
let target: Awaited<ReturnType<typeof startModernMcpTarget>>;
let clawhub: ClawHubStandIn;
let doc: { paths: Record<string, Record<string, { parameters?: { name: string; in: string; required?: boolean }[] }>> };
const seeded: Record<string, string> = {};

beforeAll(async () => {
  target = await startModernMcpTarget([{ name: 'get_forecast', description: 'Forecast', inputSchema: { type: 'object' } }]);
  clawhub = await startClawHub();
  clawhub.skills.set('weather', recordedSkill('weather', { now: new Date() }));
  const small = String(QUOTA);
  t = await startTestApp({
    ALLOW_PRIVATE_TARGETS: '1',
    CLAWHUB_API_URL: clawhub.url,
    TRUST_PROXY: '1',
    RATE_LIMIT_PROBES_PER_MINUTE: small,
    RATE_LIMIT_PREFLIGHT_PER_MINUTE: small,
    RATE_LIMIT_GATE_PER_MINUTE: small,
    RATE_LIMIT_MCP_PREFLIGHT_PER_MINUTE: small,
    RATE_LIMIT_A2A_SKILLS_PER_MINUTE: small,
    RATE_LIMIT_BUNDLE_PER_MINUTE: small,
    RATE_LIMIT_SEARCH_PER_MINUTE: small,
    RATE_LIMIT_PAGES_PER_MINUTE: small,
  });
  const r = await json(postJson(`${t.base}/api/report`, { server_url: target.url, success: true, latency_ms: 42, tool_name: 'get_forecast', http_status: 200 }));
  seeded.url = r.server_url;
  seeded.slug = (await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(target.url)}`))).server.slug;
  const pre = await json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target.url)}`, { headers: { 'x-forwarded-for': '192.0.2.250' } }));
  seeded.receipt_id = pre.receipt_id;
  seeded.jws = pre.diligence_receipt;
  const reg = await json(postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': '192.0.2.251' }));
  seeded.key = reg.api_key;
  doc = await json(fetch(`${t.base}/openapi.json`));
}, 120_000);

afterAll(async () => {
  await t?.close();
  await target?.close();
  await clawhub?.close();
});

/** Seeded input (`fresh` unset) or a server URL nobody used before (so no receipt is shared). */
let unique = 0;
function valueFor(name: string, fresh: boolean): string | undefined {
  switch (name) {
    case 'url':
    case 'server':
    case 'server_url':
    case 'serverUrl':
    case 'target':
      // Untracked, on a port nothing listens on: probes of it fail at once, pre-flights sign.
      return fresh ? `http://127.0.0.1:9/writers-${++unique}/mcp` : seeded.url;
    case 'server_slug':
    case 'serverSlug':
    case 'slug':
      return seeded.slug;
    case 'receipt_id':
    case 'receiptId':
    case 'id':
      return seeded.receipt_id;
    case 'jws':
    case 'attestation':
      return seeded.jws;
    case 'registry':
      return 'clawhub';
    case 'skill':
      return 'weather';
    case 'q':
      return 'writers';
    case 'window':
      return '24h';
    default:
      return undefined;
  }
}

/** POST bodies of the REST routes that are not JSON-RPC doors (those are driven call by call below). */
const BODIES: Record<string, (fresh: boolean) => unknown> = {
  '/api/report': (fresh) => ({ server_url: valueFor('url', fresh), success: true, latency_ms: 7 }),
  '/agent/auth': () => ({ type: 'anonymous', requested_credential_type: 'api_key' }),
  '/v1/traces': () => ({}),
  '/v1/metrics': () => ({}),
  // The gate judges the forwarded request (any method): an MCP call's body.
  '/v1/gate': () => ({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  '/v1/gate/*': () => ({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
};

/** Headers a route needs to reach its handler. */
function headersFor(url: string, fresh: boolean): Record<string, string> {
  if (url.startsWith('/v1/gate')) return { 'x-mcp-server': valueFor('url', fresh)! };
  if (url.startsWith('/agent-query')) return { authorization: `Bearer ${seeded.key}` };
  return {};
}

/**
 * Calls that store receipts under another bound than a per-minute rate limit, and why. Each must
 * really store (checked), so the entry cannot outlive the call it excuses.
 */
const BOUNDED_OTHERWISE: Record<string, string> = {
  'GET /agent-query/:server_slug': 'each receipt spends one check of a trial key (50 per key, 5 keys per hour per address) or a paid x402 verdict',
  'HEAD /agent-query/:server_slug': 'the same handler as GET',
  'observatory.v1.AccessService/AgentQuery': 'the same as GET /agent-query/{server_slug}',
};

/** Streaming methods, which this test does not call, and why none stores a receipt. */
const STREAMING_REVIEWED: Record<string, string> = {
  'observatory.v1.TelemetryService/ReportStream': 'stores telemetry rows (the report path), never a receipt',
  'grpc.health.v1.Health/Watch': 'reads the process status',
  'grpc.reflection.v1.ServerReflection/ServerReflectionInfo': 'reads descriptors',
  'grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo': 'reads descriptors',
};

/** Request messages the field names cannot build. */
const CONNECT_BODIES: Record<string, (fresh: boolean) => unknown> = {
  'envoy.service.auth.v3.Authorization/Check': (fresh) => {
    const u = new URL(valueFor('url', fresh)!);
    return { attributes: { request: { http: { host: u.host, path: u.pathname, scheme: u.protocol.replace(':', '') } } } };
  },
  'opentelemetry.proto.collector.trace.v1.TraceService/Export': () => ({}),
  'opentelemetry.proto.collector.metrics.v1.MetricsService/Export': () => ({}),
};

const SERVICES: DescService[] = [
  TrustService,
  TelemetryService,
  ReceiptService,
  ComplianceService,
  AccessService,
  Authorization,
  TraceService,
  MetricsService,
  Health,
  reflectionV1.ServerReflection,
  reflectionV1alpha.ServerReflection,
];

const receiptRows = async () => Number((await t.obs.db.query<{ n: string | number }>('SELECT count(*) AS n FROM receipts'))[0]!.n);

let ipCounter = 0;
const freshIp = () => `198.18.${Math.floor(++ipCounter / 250)}.${(ipCounter % 250) + 1}`;

interface Door {
  /** How the door is named in failures and in BOUNDED_OTHERWISE. */
  name: string;
  /** One call from `ip`; whether it was refused by a limit. */
  call(ip: string, fresh: boolean): Promise<{ refused: boolean; status: number; body: string }>;
}

async function send(path: string, init: { method: string; headers: Record<string, string>; body?: string }, ip: string) {
  const res = await fetch(`${t.base}${path}`, { method: init.method, headers: { ...init.headers, 'x-forwarded-for': ip }, body: init.body });
  const body = await res.text();
  return { res, body };
}

function restDoors(): { doors: Door[]; problems: string[] } {
  const doors: Door[] = [];
  const problems: string[] = [];
  for (const r of registeredRoutes(t.obs.app)) {
    // Connect/gRPC procedures are driven by method below.
    if (/^\/[a-z][\w]*(\.[\w]+)+\/[A-Z]\w*$/.test(r.url)) continue;
    if (r.method === 'OPTIONS') continue;
    if (r.url === '/mcp' && r.method === 'POST') continue;
    if (r.url === '/a2a' && r.method === 'POST') continue;
    const name = `${r.method} ${r.url}`;
    const docPath = r.url.replace(/:(\w+)/g, '{$1}');
    const op = doc.paths[docPath]?.[r.method === 'HEAD' ? 'get' : r.method.toLowerCase()];
    const params = [...(op?.parameters ?? [])];
    for (const table of [PROBING_PAGES, SEARCH_RATE_LIMITED]) {
      const p = table.get(r.url);
      if (p !== undefined) params.push({ name: p, in: 'query' });
    }
    const missing = params.filter((p) => p.required && (p.in === 'query' || p.in === 'path') && valueFor(p.name, false) === undefined);
    if (missing.length) problems.push(`${name}: no sample for ${missing.map((p) => p.name).join(', ')}`);
    if (r.method === 'POST' && !BODIES[r.url]) problems.push(`${name}: no sample body`);
    doors.push({
      name,
      async call(ip, fresh) {
        let path = r.url.replace(/:(\w+)/g, (_, n: string) => encodeURIComponent(valueFor(n, fresh) ?? 'x')).replace('*', 'weather/mcp');
        const qs = params.filter((p) => p.in === 'query' && valueFor(p.name, fresh) !== undefined).map((p) => `${p.name}=${encodeURIComponent(valueFor(p.name, fresh)!)}`);
        if (qs.length) path += `?${qs.join('&')}`;
        const headers: Record<string, string> = { accept: 'application/json, */*', ...headersFor(r.url, fresh) };
        const body = r.method === 'POST' ? JSON.stringify(BODIES[r.url]?.(fresh) ?? {}) : undefined;
        if (body !== undefined) headers['content-type'] = 'application/json';
        const { res, body: text } = await send(path, { method: r.method, headers, body }, ip);
        return { refused: res.status === 429, status: res.status, body: text };
      },
    });
  }
  return { doors, problems };
}

function connectDoors(): { doors: Door[]; problems: string[] } {
  const byName = new Map<string, DescMethod>(SERVICES.flatMap((s) => s.methods.map((m) => [`${s.typeName}/${m.name}`, m] as const)));
  const doors: Door[] = [];
  const problems: string[] = [];
  const procedures = new Set(registeredRoutes(t.obs.app).filter((r) => /^\/[a-z][\w]*(\.[\w]+)+\/[A-Z]\w*$/.test(r.url)).map((r) => r.url.slice(1)));
  for (const name of procedures) {
    const m = byName.get(name);
    if (!m) {
      problems.push(`${name}: a served procedure this test does not know (add its service to SERVICES)`);
      continue;
    }
    if (m.methodKind !== 'unary') {
      if (!STREAMING_REVIEWED[name]) problems.push(`${name}: a ${m.methodKind} method nobody reviewed for receipts (STREAMING_REVIEWED)`);
      continue;
    }
    doors.push({
      name,
      async call(ip, fresh) {
        let message: unknown = CONNECT_BODIES[name]?.(fresh);
        if (message === undefined) {
          const o: Record<string, unknown> = {};
          for (const f of m.input.fields) {
            const v = f.fieldKind === 'scalar' ? (valueFor(f.name, fresh) ?? valueFor(f.localName, fresh)) : undefined;
            if (v !== undefined) o[f.jsonName] = v;
          }
          message = o;
        }
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (name === 'observatory.v1.AccessService/AgentQuery') headers.authorization = `Bearer ${seeded.key}`;
        const { res, body } = await send(`/${name}`, { method: 'POST', headers, body: JSON.stringify(message) }, ip);
        // The ext_authz Check answers its refusal in the message: status RESOURCE_EXHAUSTED (8).
        let inMessage = false;
        if (res.status === 200 && name.startsWith('envoy.')) inMessage = (JSON.parse(body) as { status?: { code?: number } }).status?.code === 8;
        return { refused: res.status === 429 || inMessage, status: res.status, body };
      },
    });
  }
  return { doors, problems };
}

async function jsonRpcDoors(): Promise<{ doors: Door[]; problems: string[] }> {
  const doors: Door[] = [];
  const problems: string[] = [];
  const mcpHeaders = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
  const list = await send('/mcp', { method: 'POST', headers: mcpHeaders, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) }, freshIp());
  const tools = (JSON.parse(list.body) as { result: { tools: { name: string; inputSchema: { properties?: Record<string, unknown>; required?: string[] } }[] } }).result.tools;
  expect(tools.length).toBeGreaterThan(0);
  for (const tool of tools) {
    const missing = (tool.inputSchema.required ?? []).filter((p) => valueFor(p, false) === undefined);
    if (missing.length) problems.push(`MCP ${tool.name}: no sample for ${missing.join(', ')}`);
    doors.push({
      name: `MCP tools/call ${tool.name}`,
      async call(ip, fresh) {
        const args: Record<string, string> = {};
        for (const p of Object.keys(tool.inputSchema.properties ?? {})) {
          const v = valueFor(p, fresh);
          if (v !== undefined) args[p] = v;
        }
        const { res, body } = await send('/mcp', { method: 'POST', headers: mcpHeaders, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: tool.name, arguments: args } }) }, ip);
        return { refused: res.status === 429, status: res.status, body };
      },
    });
  }
  for (const skill of A2A_SKILLS) {
    doors.push({
      name: `A2A message/send ${skill.id}`,
      async call(ip, fresh) {
        const text = skill.examples[0]!.replace(/https:\/\/weather\.example\.com\/mcp/, valueFor('url', fresh)!);
        const msg = { jsonrpc: '2.0', id: 3, method: 'message/send', params: { message: { kind: 'message', role: 'user', messageId: crypto.randomUUID(), parts: [{ kind: 'text', text }] } } };
        const { res, body } = await send('/a2a', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(msg) }, ip);
        return { refused: res.status === 429, status: res.status, body };
      },
    });
  }
  return { doors, problems };
}

describe(`every call that stores a receipt is rate limited (${backend})`, () => {
  it('finds the writers among every REST route, Connect method, MCP tool and A2A skill, and each is refused within its quota', async () => {
    const rest = restDoors();
    const connect = connectDoors();
    const rpc = await jsonRpcDoors();
    // A door the test cannot drive is a door it cannot vouch for.
    expect([...rest.problems, ...connect.problems, ...rpc.problems]).toEqual([]);
    const doors = [...rest.doors, ...connect.doors, ...rpc.doors];
    expect(rest.doors.length).toBeGreaterThan(60);
    expect(connect.doors.length).toBeGreaterThan(25);

    const writers: string[] = [];
    const unlimited: string[] = [];
    for (const door of doors) {
      for (const fresh of [false, true]) {
        const ip = freshIp();
        const before = await receiptRows();
        const first = await door.call(ip, fresh);
        if ((await receiptRows()) === before) continue;
        writers.push(door.name);
        if (BOUNDED_OTHERWISE[door.name]) break;
        // The quota from one client network, then a refusal.
        let refused = first.refused;
        const seen = [first.status];
        for (let i = 0; i < QUOTA && !refused; i++) {
          const r = await door.call(ip, fresh);
          seen.push(r.status);
          refused = r.refused;
        }
        if (!refused) unlimited.push(`${door.name} (answers ${seen.join(', ')})`);
        break;
      }
    }
    // The detection works: the known writers are found, through every door they have.
    expect(writers).toEqual(
      expect.arrayContaining([
        'GET /v1/preflight',
        'GET /v1/erc8004-attestation',
        'HEAD /v1/erc8004-attestation',
        'GET /api/drift',
        'GET /v1/gate',
        'observatory.v1.TrustService/Preflight',
        'observatory.v1.ReceiptService/GetErc8004Attestation',
        'observatory.v1.TrustService/GetDrift',
        'envoy.service.auth.v3.Authorization/Check',
        'MCP tools/call preflight_check',
        'A2A message/send preflight',
        'GET /agent-query/:server_slug',
        'observatory.v1.AccessService/AgentQuery',
      ]),
    );
    expect(unlimited).toEqual([]);
  }, 240_000);
});
