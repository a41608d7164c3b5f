import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Validator } from '@seriousme/openapi-schema-validator';
import { registeredRoutes } from '../src/http/problem.js';
import { NOT_IN_OPENAPI, REST_ADAPTERS } from '../src/http/rest-adapters.js';
import { restBindings } from '../src/http/openapi.js';
import { startModernMcpTarget } from './support/mcp-target.js';
import { startClawHub, recordedSkill, type ClawHubStandIn } from './support/clawhub.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// /openapi.json is generated from the descriptors (google.api.http, buf.validate, the messages)
// plus the hand-written adapters of src/http/rest-adapters.ts. Checked against the running
// service: every fastify route is documented (or listed in NOT_IN_OPENAPI with its reason), and
// every documented operation answers a documented status with a body valid against its schema.

type Op = { parameters?: { name: string; in: string; required?: boolean; schema: Record<string, unknown> }[]; requestBody?: unknown; responses: Record<string, { content?: Record<string, { schema?: unknown }> }> };
type Doc = { paths: Record<string, Record<string, Op>>; components: { schemas: Record<string, unknown> } };

let t: TestApp;
let target: Awaited<ReturnType<typeof startModernMcpTarget>>;
let clawhub: ClawHubStandIn;
let doc: Doc;
const seeded: Record<string, string> = {};

beforeAll(async () => {
  target = await startModernMcpTarget([{ name: 'get_forecast', description: 'Forecast', inputSchema: { type: 'object' } }]);
  clawhub = await startClawHub();
  clawhub.skills.set('weather', recordedSkill('weather', { now: new Date() }));
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', CLAWHUB_API_URL: clawhub.url, RATE_LIMIT_PROBES_PER_MINUTE: '0', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' });
  const r = await json(postJson(`${t.base}/api/report`, { server_url: target.url, success: true, latency_ms: 42, tool_name: 'get_forecast', http_status: 200 }));
  seeded.url = r.server_url;
  const trust = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(target.url)}`));
  seeded.slug = trust.server.slug;
  const pre = await json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target.url)}`));
  seeded.receipt_id = pre.receipt_id;
  seeded.jws = pre.diligence_receipt;
  doc = await json(fetch(`${t.base}/openapi.json`));
}, 120_000);

afterAll(async () => {
  await t?.close();
  await target?.close();
  await clawhub?.close();
});

/** A valid value for each parameter name the API uses. */
function valueFor(name: string): string | undefined {
  switch (name) {
    case 'url':
    case 'server':
    case 'server_url':
    case 'target':
      return seeded.url;
    case 'server_slug':
    case 'slug':
      return seeded.slug;
    case 'receipt_id':
    case 'id':
      return seeded.receipt_id;
    case 'jws':
      return seeded.jws;
    case 'registry':
      return 'clawhub';
    case 'skill':
      return 'weather';
    default:
      return undefined;
  }
}

const BODIES: Record<string, unknown> = {
  '/api/report': { server_url: 'https://documented.example.com/mcp', success: true, latency_ms: 7 },
  '/agent/auth': {},
  '/a2a': { jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'no-such-task' } },
  '/mcp': { jsonrpc: '2.0', id: 1, method: 'ping' },
};

const mediaType = (ct: string | null) => (ct ?? '').split(';')[0]!.trim().toLowerCase();

describe(`/openapi.json against the running service (${backend})`, () => {
  it('is a valid OpenAPI 3.1 document whose RPC operations are exactly the google.api.http bindings', async () => {
    const v = await new Validator().validate(doc as never);
    expect(v.errors ?? [], JSON.stringify(v.errors)).toEqual([]);
    for (const b of restBindings()) expect(doc.paths[b.path]?.[b.method], `${b.method} ${b.path}`).toBeDefined();
    for (const a of REST_ADAPTERS) expect(doc.paths[a.path]?.[a.method], `${a.method} ${a.path}`).toBeDefined();
    const count = Object.values(doc.paths).reduce((n, item) => n + Object.keys(item).length, 0);
    expect(count).toBe(restBindings().length + REST_ADAPTERS.length);
  });

  it("documents every REST route of fastify's route table", () => {
    const documented = new Set<string>();
    for (const [path, item] of Object.entries(doc.paths)) for (const m of Object.keys(item)) documented.add(`${m.toUpperCase()} ${path}`);
    const alsoServed = REST_ADAPTERS.flatMap((a) => a.alsoServes ?? []);
    const undocumented: string[] = [];
    let checked = 0;
    for (const r of registeredRoutes(t.obs.app)) {
      // Connect/gRPC procedures (/package.Service/Method) are described by proto/, not OpenAPI.
      if (/^\/[a-z][\w]*(\.[\w]+)+\/[A-Z]\w*$/.test(r.url)) continue;
      checked++;
      const path = r.url.replace(/:(\w+)/g, '{$1}');
      const method = r.method === 'HEAD' ? 'GET' : r.method;
      const key = `${method} ${path}`;
      if (documented.has(key) || alsoServed.includes(key) || alsoServed.includes(`* ${path}`) || `${method} ${r.url}` in NOT_IN_OPENAPI) continue;
      undocumented.push(key);
    }
    expect(checked).toBeGreaterThan(60);
    expect(undocumented).toEqual([]);
  });

  it('every documented operation answers a documented status with a body valid against the documented schema', async () => {
    const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
    ajv.addSchema({ $id: 'openapi', components: doc.components });
    const rewrite = (s: unknown): unknown => JSON.parse(JSON.stringify(s).replace(/"#\/components\//g, '"openapi#/components/'));
    const failures: string[] = [];
    let validated = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        let url = path.replace(/\{(\w+)\}/g, (_, n: string) => encodeURIComponent(valueFor(n) ?? 'x'));
        const qs = (op.parameters ?? [])
          .filter((p) => p.in === 'query' && valueFor(p.name) !== undefined && (p.required || ['server', 'id'].includes(p.name)))
          .map((p) => `${p.name}=${encodeURIComponent(valueFor(p.name)!)}`);
        if (qs.length) url += `?${qs.join('&')}`;
        const headers: Record<string, string> = { accept: path === '/mcp' && method === 'post' ? 'application/json, text/event-stream' : 'application/json, */*' };
        if (path.startsWith('/v1/gate')) headers['x-mcp-server'] = seeded.url!;
        if (path === '/mcp' && method === 'post') headers['mcp-protocol-version'] = '2025-06-18';
        const init: RequestInit = { method: method.toUpperCase(), headers };
        if (method === 'post') {
          headers['content-type'] = 'application/json';
          init.body = JSON.stringify(BODIES[path] ?? {});
        }
        const res = await fetch(`${t.base}${url}`, init);
        const text = await res.text();
        const what = `${method.toUpperCase()} ${url} -> ${res.status}`;
        const documentedResponse = op.responses[String(res.status)];
        if (!documentedResponse) {
          failures.push(`${what}: status not documented (${text.slice(0, 200)})`);
          continue;
        }
        const type = mediaType(res.headers.get('content-type'));
        const content = documentedResponse.content ?? {};
        const entry = content[type] ?? (type === 'application/json' ? undefined : Object.entries(content).find(([k]) => k.endsWith('+json') && type.endsWith('json'))?.[1]);
        if (!entry) {
          failures.push(`${what}: content type ${type} not documented (${Object.keys(content).join(', ')})`);
          continue;
        }
        if (!type.endsWith('json') || entry.schema === undefined) continue;
        const validate = ajv.compile(rewrite(entry.schema) as object);
        if (!validate(JSON.parse(text))) failures.push(`${what}: ${ajv.errorsText(validate.errors)} in ${text.slice(0, 300)}`);
        else validated++;
      }
    }
    expect(failures).toEqual([]);
    expect(validated).toBeGreaterThan(30);
  }, 240_000);

  it('answers the 200 each plain-message RPC documents for a valid request (not only an error)', async () => {
    const ok: string[] = [];
    const not: string[] = [];
    for (const b of restBindings()) {
      if (b.method !== 'get') continue;
      let url = b.path.replace(/\{(\w+)\}/g, (_, n: string) => encodeURIComponent(valueFor(n)!));
      const required = (doc.paths[b.path]![b.method]!.parameters ?? []).filter((p) => p.in === 'query' && p.required);
      if (required.length) url += `?${required.map((p) => `${p.name}=${encodeURIComponent(valueFor(p.name)!)}`).join('&')}`;
      const res = await fetch(`${t.base}${url}`, { headers: b.rpc.name === 'AgentQuery' ? {} : { accept: 'application/json' } });
      await res.arrayBuffer();
      if (res.status === 200) ok.push(b.rpc.name);
      else not.push(`${b.rpc.name} ${url} -> ${res.status}`);
    }
    expect(not.filter((n) => !n.startsWith('AgentQuery '))).toEqual([]);
    // Everything but the paid verdict (402 without a key) answers 200 for the seeded server.
    expect(ok.length).toBeGreaterThanOrEqual(restBindings().filter((b) => b.method === 'get').length - 1);
  }, 240_000);
});
