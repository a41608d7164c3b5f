import { createServer } from 'node:net';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { A2A_METHODS } from '../src/agents/a2a-card.js';
import { compareServerCard } from '../src/domain/server-card.js';
import { readToolManifest } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher } from '../src/probes/safe-fetch.js';
import { findServerCard } from '../src/probes/server-card.js';
import { SPEC_SECTION_4_PATHS } from './support/spec-paths.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';

// Every discovery document: served, valid for its own standard, and consistent with the others
// and with the app (every endpoint a document names exists and answers).

let app: TestApp;
let base: string;
const SERVER = 'https://search.example.com/mcp';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

beforeAll(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  app = await startTestApp({ PORT: String(port), PUBLIC_BASE_URL: base });
  await postJson(`${base}/api/report`, { server_url: SERVER, success: true, latency_ms: 50 });
});
afterAll(async () => app?.close());

const DOCS = [
  '/.well-known/agent.json',
  '/.well-known/agent-card.json',
  '/.well-known/did.json',
  '/.well-known/mcp.json',
  '/.well-known/mcp/catalog.json',
  '/.well-known/ai-plugin.json',
  '/.well-known/jwks.json',
  '/.well-known/oauth-protected-resource',
  '/.well-known/oauth-authorization-server',
  '/mcp',
  '/openapi.json',
];

describe('discovery documents', () => {
  it('are all served as JSON with a short Cache-Control and open CORS', async () => {
    for (const p of DOCS) {
      const res = await fetch(`${base}${p}`, { headers: { origin: 'https://agent.example' } });
      expect(res.status, p).toBe(200);
      expect(res.headers.get('content-type'), p).toMatch(/^application\/json/);
      expect(res.headers.get('cache-control'), p).toMatch(/max-age=([1-9]\d{1,2})\b/);
      expect(res.headers.get('access-control-allow-origin'), p).toBe('*');
      await res.json();
    }
    const llms = await fetch(`${base}/llms.txt`);
    expect(llms.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(llms.headers.get('cache-control')).toMatch(/max-age=/);
  });

  it('agent.json and agent-card.json are the same A2A 0.3 card', async () => {
    const a = await json(fetch(`${base}/.well-known/agent.json`));
    const b = await json(fetch(`${base}/.well-known/agent-card.json`));
    expect(a).toEqual(b);
    expect(a).toMatchObject({ protocolVersion: '0.3.0', url: `${base}/a2a`, preferredTransport: 'JSONRPC', version: '1.3.0' });
    for (const k of ['name', 'description', 'capabilities', 'defaultInputModes', 'defaultOutputModes', 'skills']) expect(a, k).toHaveProperty(k);
    for (const s of a.skills) {
      expect(s).toMatchObject({ id: expect.any(String), name: expect.any(String), description: expect.any(String), tags: expect.any(Array) });
    }
  });

  it("the card's skills are exactly what /a2a does, and every example runs its skill", async () => {
    const card = await json(fetch(`${base}/.well-known/agent-card.json`));
    const descriptor = await json(fetch(`${base}/a2a`));
    expect(descriptor.skills.map((s: { id: string }) => s.id)).toEqual(card.skills.map((s: { id: string }) => s.id));
    expect(descriptor.methods.map((m: { name: string }) => m.name)).toEqual([...A2A_METHODS]);
    for (const skill of card.skills as { id: string; examples: string[] }[]) {
      for (const example of skill.examples) {
        const r = await json(postJson(`${base}/a2a`, { jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: example }], messageId: 'e', kind: 'message' } } }));
        expect(r.result.metadata?.skill, example).toBe(skill.id);
        expect(['completed', 'failed'], example).toContain(r.result.status.state);
      }
    }
  });

  it('did.json is the did:web of PUBLIC_BASE_URL and lists exactly the JWKS keys', async () => {
    const did = await json(fetch(`${base}/.well-known/did.json`));
    const jwks = await json(fetch(`${base}/.well-known/jwks.json`));
    const port = new URL(base).port;
    expect(did.id).toBe(`did:web:127.0.0.1%3A${port}`);
    expect(did['@context'][0]).toBe('https://www.w3.org/ns/did/v1');
    expect(did.verificationMethod.map((v: { publicKeyJwk: unknown }) => v.publicKeyJwk)).toEqual(jwks.keys);
    for (const v of did.verificationMethod) {
      expect(v).toMatchObject({ type: 'JsonWebKey2020', controller: did.id, id: `${did.id}#${v.publicKeyJwk.kid}` });
      expect(v.publicKeyJwk).not.toHaveProperty('d');
    }
    expect(did.assertionMethod).toEqual(did.verificationMethod.map((v: { id: string }) => v.id));
  });

  it('did.json follows a key rotation', async () => {
    await app.obs.services.keyring.rotate();
    const did = await json(fetch(`${base}/.well-known/did.json`));
    const jwks = await json(fetch(`${base}/.well-known/jwks.json`));
    expect(jwks.keys.length).toBeGreaterThanOrEqual(2);
    expect(did.verificationMethod.map((v: { publicKeyJwk: unknown }) => v.publicKeyJwk)).toEqual(jwks.keys);
  });

  it('OAuth metadata: RFC 9728 protected resource and RFC 8414 authorization server agree', async () => {
    const pr = await json(fetch(`${base}/.well-known/oauth-protected-resource`));
    const as = await json(fetch(`${base}/.well-known/oauth-authorization-server`));
    expect(pr.resource).toBe(base);
    expect(pr.authorization_servers).toEqual([as.issuer]);
    expect(as.issuer).toBe(base);
    expect(new URL(as.issuer).search + new URL(as.issuer).hash).toBe('');
    expect(Array.isArray(as.response_types_supported)).toBe(true);
    expect(pr.scopes_supported).toContain('trust:read');
    expect(as.scopes_supported).toContain('trust:read');
  });

  it('mcp.json and GET /mcp describe the tools the MCP server lists', async () => {
    const doc = await json(fetch(`${base}/.well-known/mcp.json`));
    const get = await json(fetch(`${base}/mcp`));
    expect(doc).toEqual(get);
    expect(doc.transport.url).toBe(`${base}/mcp`);
    const res = await postJson(`${base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { accept: 'application/json, text/event-stream' });
    const listed = (await json(res)).result.tools;
    expect(doc.tools.map((t: { name: string }) => t.name)).toEqual(listed.map((t: { name: string }) => t.name));
    for (const t of listed) {
      const d = doc.tools.find((x: { name: string }) => x.name === t.name);
      expect(d.inputSchema.properties).toEqual(t.inputSchema.properties);
      expect(d.description).toBe(t.description);
    }
  });

  it('our Server Card: catalog -> card at /mcp/server-card (and the framework location), consistent with /mcp and with what our own probe reads', async () => {
    const catalog = await json(fetch(`${base}/.well-known/mcp/catalog.json`));
    expect(catalog.specVersion).toBe('draft');
    expect(catalog.entries).toEqual([{ identifier: expect.stringMatching(/^urn:air:127\.0\.0\.1:trust-observatory$/), displayName: 'Trust Observatory', type: 'application/mcp-server-card+json', url: `${base}/mcp/server-card` }]);
    const res = await fetch(catalog.entries[0].url, { headers: { accept: 'application/mcp-server-card+json', origin: 'https://agent.example' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/mcp-server-card\+json/);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(res.headers.get('cache-control')).toMatch(/max-age=\d+/);
    const card = (await res.json()) as { description: string };
    expect(await json(fetch(`${base}/.well-known/mcp/server-card.json`))).toEqual(card);
    const doc = await json(fetch(`${base}/mcp`));
    expect(card).toMatchObject({
      $schema: 'https://static.modelcontextprotocol.io/schemas/v2/server-card.schema.json',
      name: 'local/trust-observatory',
      version: doc.version,
      title: doc.title,
      remotes: [{ type: 'streamable-http', url: `${base}/mcp`, supportedProtocolVersions: doc.supportedProtocolVersions }],
    });
    expect(card.description.length).toBeLessThanOrEqual(100);
    expect(doc.serverCard).toBe(`${base}/mcp/server-card`);
    // The observatory's own probe, pointed at itself, finds the card and no contradiction.
    const fetcher = createSafeFetcher({ allowPrivate: true });
    const live = await readToolManifest(fetcher, `${base}/mcp`);
    expect(live).toMatchObject({ era: 'modern', protocol_version: '2026-07-28' });
    const found = await findServerCard(fetcher, `${base}/mcp`);
    expect(found?.url).toBe(`${base}/mcp/server-card`);
    expect(compareServerCard(found!.claims, { url: `${base}/mcp`, ...live, tools: live.tools.map((x) => x.name) })).toEqual([]);
  });

  it('ai-plugin.json is a v1 manifest pointing at our OpenAPI document', async () => {
    const p = await json(fetch(`${base}/.well-known/ai-plugin.json`));
    expect(p).toMatchObject({ schema_version: 'v1', auth: { type: 'none' }, api: { type: 'openapi', url: `${base}/openapi.json` } });
    expect(p.name_for_model).toMatch(/^[a-zA-Z0-9_]{1,64}$/);
    expect(p.description_for_human.length).toBeLessThanOrEqual(120);
    expect((await fetch(p.logo_url)).headers.get('content-type')).toMatch(/^image\/svg\+xml/);
  });

  it('llms.txt says what we do, the thresholds, the version and every endpoint', async () => {
    const text = await (await fetch(`${base}/llms.txt`)).text();
    expect(text.startsWith('# Trust Observatory\n')).toBe(true);
    expect(text).toContain('1.3.0');
    expect(text).toMatch(/PASS: trust_score >= 60/);
    expect(text).toMatch(/FAIL: trust_score < 40/);
    const spec = await json(fetch(`${base}/openapi.json`));
    for (const p of Object.keys(spec.paths)) expect(text, p).toContain(`(${base}${p})`);
  });
});

describe('/openapi.json', () => {
  it('is a valid OpenAPI 3.1 document with info.version 1.3.0', async () => {
    const spec = await json(fetch(`${base}/openapi.json`));
    const v = new Validator();
    const result = await v.validate(spec);
    expect(result.errors ?? [], JSON.stringify(result.errors)).toEqual([]);
    expect(result.valid).toBe(true);
    expect(spec.openapi).toBe('3.1.0');
    expect(spec.info.version).toBe('1.3.0');
  });

  it('covers every REST path of SPEC section 4 with its parameters, responses and problem+json errors', async () => {
    const spec = await json(fetch(`${base}/openapi.json`));
    for (const [method, path, params] of SPEC_SECTION_4_PATHS) {
      const op = spec.paths[path]?.[method.toLowerCase()];
      expect(op, `${method} ${path}`).toBeDefined();
      expect(op.responses['200'], `${method} ${path}`).toBeDefined();
      const names = (op.parameters ?? []).map((p: { name: string }) => p.name);
      for (const p of params) expect(names, `${method} ${path} parameter ${p}`).toContain(p);
      for (const [status, r] of Object.entries(op.responses as Record<string, { content?: Record<string, unknown> }>)) {
        if (Number(status) >= 400) expect(Object.keys(r.content ?? {}), `${method} ${path} ${status}`).toEqual(['application/problem+json']);
      }
    }
  });
});

describe('cross-check: every endpoint a document names exists on this app', () => {
  it('answers something other than a missing-route 404', async () => {
    const receipt = await app.obs.services.receipts.issue('attestation', SERVER, { verdict: 'PASS' });
    const spec = await json(fetch(`${base}/openapi.json`));
    const urls = new Map<string, string>(); // url -> method
    const fill = (p: string) => p.replace('{server_slug}', 'search-example-com-mcp').replace('{receipt_id}', receipt.receiptId);
    for (const [p, ops] of Object.entries(spec.paths as Record<string, Record<string, unknown>>)) for (const m of Object.keys(ops)) urls.set(`${m.toUpperCase()} ${base}${fill(p)}`, m);

    // Absolute URLs in the other documents.
    const collect = (v: unknown) => {
      if (typeof v === 'string') {
        if (v.startsWith(base) && !v.includes('<')) urls.set(`GET ${v}`, 'get');
      } else if (Array.isArray(v)) v.forEach(collect);
      else if (v && typeof v === 'object') Object.values(v).forEach(collect);
    };
    for (const p of DOCS) collect(await json(fetch(`${base}${p}`)));
    for (const m of (await (await fetch(`${base}/llms.txt`)).text()).matchAll(/\((http[^)\s]+)\)/g)) urls.set(`GET ${fill(m[1]!)}`, 'get');

    expect(urls.size).toBeGreaterThan(30);
    const missing: string[] = [];
    for (const key of urls.keys()) {
      const [method, url] = key.split(' ') as [string, string];
      const res = await fetch(url, {
        method,
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: method === 'POST' ? '{}' : undefined,
      });
      const body = await res.text();
      // A 404 is fine only when it is about data (e.g. not_tracked), never "no resource at this path".
      if (res.status === 404 && /"code":"not_found"/.test(body) && /no resource at/.test(body)) missing.push(key);
    }
    expect(missing).toEqual([]);
  });
});
