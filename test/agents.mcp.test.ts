import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHTTPClientTransportV2 } from '@modelcontextprotocol/client';
import { readFile } from 'node:fs/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// /mcp with both official MCP SDK client lines: the v2 client speaks MCP 2026-07-28 (no
// initialize), the 1.x client the 2025 handshake; plus raw HTTP for the transport rules and the
// 2026-07-28 error codes a stock client does not exercise.

let app: TestApp;
let client: Client;
const SERVER = 'https://weather.example.com/mcp';
const MCP_HEADERS = { accept: 'application/json, text/event-stream' };

beforeAll(async () => {
  app = await startTestApp();
  for (let i = 0; i < 5; i++) await postJson(`${app.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 100 + i, tool_name: 'get_forecast' });
  client = new Client({ name: 'test-agent', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${app.base}/mcp`)));
});
afterAll(async () => {
  await client?.close();
  await app?.close();
});

const text = (r: object) => (((r as { content?: unknown }).content as { type: string; text: string }[])[0]?.text ?? '');

describe(`MCP SDK 1.x client: the 2025 initialize handshake (${backend})`, () => {
  it('negotiates and sees serverInfo version 1.3.0', () => {
    expect(client.getServerVersion()).toMatchObject({ name: 'trust-observatory', version: '1.3.0' });
    expect(client.getServerCapabilities()?.tools).toBeDefined();
  });

  it('lists the three tools with descriptions, input and output schemas', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['check_trust', 'preflight_check', 'verify_attestation']);
    for (const t of tools) {
      expect(t.description?.length).toBeGreaterThan(40);
      expect(t.inputSchema.type).toBe('object');
      expect(t.outputSchema?.type).toBe('object');
    }
    expect(tools.find((t) => t.name === 'check_trust')!.inputSchema.required).toEqual(['server']);
  });

  it('check_trust returns the same record as GET /api/trust, as structured content', async () => {
    const r = await client.callTool({ name: 'check_trust', arguments: { server: SERVER } });
    expect(r.isError).toBeFalsy();
    const rest = await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(SERVER)}`));
    const sc = r.structuredContent as Record<string, unknown>;
    expect(sc).toMatchObject({ found: true, target: SERVER, verdict: rest.verdict, server: rest.server, metrics: rest.metrics });
    expect(JSON.parse(text(r))).toEqual(sc);
  });

  it('check_trust resolves a name and a slug', async () => {
    for (const name of ['weather.example.com/mcp', 'weather-example-com-mcp']) {
      const r = await client.callTool({ name: 'check_trust', arguments: { server: name } });
      expect((r.structuredContent as { server: { url: string } }).server.url).toBe(SERVER);
    }
  });

  it('check_trust of an untracked server answers found:false, UNRATED', async () => {
    const r = await client.callTool({ name: 'check_trust', arguments: { server: 'https://nobody.example.org/mcp' } });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ found: false, verdict: 'UNRATED' });
  });

  it('check_trust refuses malformed input exactly as GET /api/trust does: isError, same detail, same code', async () => {
    for (const bad of ['', '   ', 'ftp://weather.example.com/mcp', 'http://', 'https://user:secret@weather.example.com/mcp', 'x'.repeat(5000), 'weather\u0000example']) {
      const rest = await expectProblem(await fetch(`${app.base}/api/trust?url=${encodeURIComponent(bad)}`), 400, 'invalid_argument');
      const r = await client.callTool({ name: 'check_trust', arguments: { server: bad } });
      expect(r.isError, JSON.stringify(bad)).toBe(true);
      expect(text(r), JSON.stringify(bad)).toBe(rest.detail);
      expect((r._meta as Record<string, unknown>)['dev.trust-observatory/problem']).toEqual({ code: 'invalid_argument', status: 400 });
    }
  });

  it('verify_attestation verifies one of our receipts and refuses a forged one', async () => {
    const issued = await app.obs.services.receipts.issue('attestation', SERVER, { verdict: 'PASS' }, { persist: false });
    const ok = await client.callTool({ name: 'verify_attestation', arguments: { jws: issued.jws } });
    expect(ok.structuredContent).toMatchObject({ valid: true, header: { alg: 'EdDSA', kid: issued.kid }, payload: { jti: issued.receiptId, sub: SERVER } });
    const [h, p, s] = issued.jws.split('.');
    const forged = `${h}.${Buffer.from(JSON.stringify({ ...issued.payload, verdict: 'FAIL' })).toString('base64url')}.${s}`;
    expect(p).not.toBe(forged.split('.')[1]);
    const bad = await client.callTool({ name: 'verify_attestation', arguments: { jws: forged } });
    expect(bad.structuredContent).toMatchObject({ valid: false });
    const junk = await client.callTool({ name: 'verify_attestation', arguments: { jws: 'not-a-jws' } });
    expect(junk.structuredContent).toMatchObject({ valid: false });
  });

  it('preflight_check answers a verdict with a verifiable receipt', async () => {
    const r = await client.callTool({ name: 'preflight_check', arguments: { target: SERVER } });
    expect(r.isError ?? false).toBe(false);
    const sc = r.structuredContent as Record<string, string>;
    expect(sc.verdict).toMatch(/^(PASS|UNCERTAIN|FAIL)$/);
    expect(sc.receipt_id).toMatch(/^[0-9a-f]{16}$/);
    const v = await client.callTool({ name: 'verify_attestation', arguments: { jws: sc.diligence_receipt! } });
    expect(v.structuredContent).toMatchObject({ valid: true, payload: { jti: sc.receipt_id, kind: 'preflight' } });
  });

  it('an unknown tool is an error', async () => {
    const r = await client.callTool({ name: 'no_such_tool', arguments: {} }).catch((e: Error) => ({ isError: true, content: [{ type: 'text', text: e.message }] }));
    expect(r.isError).toBe(true);
  });
});

describe(`MCP SDK v2 client: MCP 2026-07-28, stateless, no initialize (${backend})`, () => {
  let v2: ClientV2;
  const sent: { method: string; headers: Record<string, string> }[] = [];

  beforeAll(async () => {
    // The fetch the transport uses records every JSON-RPC message it sends, with its headers.
    const recording = async (url: string | URL, init?: RequestInit) => {
      if (typeof init?.body === 'string') {
        const msg = JSON.parse(init.body) as { method?: string };
        if (msg.method) sent.push({ method: msg.method, headers: Object.fromEntries(new Headers(init.headers).entries()) });
      }
      return fetch(url, init);
    };
    v2 = new ClientV2({ name: 'test-agent-v2', version: '2.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await v2.connect(new StreamableHTTPClientTransportV2(new URL(`${app.base}/mcp`), { fetch: recording }));
  });
  afterAll(async () => v2?.close());

  it('negotiates 2026-07-28 with server/discover and never sends initialize', async () => {
    expect(v2.getProtocolEra()).toBe('modern');
    expect(v2.getNegotiatedProtocolVersion()).toBe('2026-07-28');
    expect(v2.getServerVersion()).toMatchObject({ name: 'trust-observatory', version: '1.3.0' });
    expect(v2.getDiscoverResult()?.supportedVersions).toEqual(['2026-07-28']);
    const { tools } = await v2.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['check_trust', 'preflight_check', 'verify_attestation']);
    const r = await v2.callTool({ name: 'check_trust', arguments: { server: SERVER } });
    const rest = await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(SERVER)}`));
    expect(r.structuredContent).toMatchObject({ found: true, verdict: rest.verdict, server: rest.server, metrics: rest.metrics });
    const methods = sent.map((m) => m.method);
    expect(methods).toContain('server/discover');
    expect(methods).not.toContain('initialize');
    expect(methods).not.toContain('notifications/initialized');
    // Each request carried the 2026-07-28 headers.
    const call = sent.find((m) => m.method === 'tools/call')!;
    expect(call.headers).toMatchObject({ 'mcp-method': 'tools/call', 'mcp-name': 'check_trust', 'mcp-protocol-version': '2026-07-28' });
  });

  it('the same three tools answer the same shapes as for the 1.x client', async () => {
    const pf = await v2.callTool({ name: 'preflight_check', arguments: { target: SERVER } });
    const sc = pf.structuredContent as Record<string, string>;
    expect(sc.receipt_id).toMatch(/^[0-9a-f]{16}$/);
    const ver = await v2.callTool({ name: 'verify_attestation', arguments: { jws: sc.diligence_receipt! } });
    expect(ver.structuredContent).toMatchObject({ valid: true, payload: { jti: sc.receipt_id, kind: 'preflight' } });
    const v1Tools = (await client.listTools()).tools;
    const v2Tools = (await v2.listTools()).tools;
    for (const t of v1Tools) {
      const m = v2Tools.find((x) => x.name === t.name)!;
      expect(m.outputSchema).toEqual(t.outputSchema);
      expect(m.inputSchema).toEqual(t.inputSchema);
    }
    const bad = await v2.callTool({ name: 'check_trust', arguments: { server: 'ftp://x.example' } });
    expect(bad.isError).toBe(true);
    expect((bad.content as { text: string }[])[0]!.text).toBe('url: only http and https URLs are accepted');
  });
});

describe(`/mcp over raw HTTP: 2026-07-28 errors and every earlier revision (${backend})`, () => {
  const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'curl', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} };
  const modernHeaders = (method: string, extra: Record<string, string> = {}) => ({ ...MCP_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...extra });

  it('a modern request with no initialize answers, with cache hints on tools/list', async () => {
    const res = await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: META } }, modernHeaders('tools/list'));
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.result.tools).toHaveLength(3);
    expect(body.result).toMatchObject({ ttlMs: 300_000, cacheScope: 'public' });
  });

  it('header/body mismatch is -32020 with HTTP 400', async () => {
    // Mcp-Method names another method than the body.
    const m1 = await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: META } }, modernHeaders('tools/call'));
    expect(m1.status).toBe(400);
    expect((await json(m1)).error.code).toBe(-32020);
    // MCP-Protocol-Version header disagrees with the body's envelope.
    const m2 = await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: META } }, modernHeaders('tools/list', { 'mcp-protocol-version': '2025-06-18' }));
    expect(m2.status).toBe(400);
    expect((await json(m2)).error.code).toBe(-32020);
    // Mcp-Name names another tool than the body.
    const call = { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'check_trust', arguments: { server: SERVER }, _meta: META } };
    const m3 = await postJson(`${app.base}/mcp`, call, modernHeaders('tools/call', { 'mcp-name': 'preflight_check' }));
    expect(m3.status).toBe(400);
    expect((await json(m3)).error.code).toBe(-32020);
    // Matching headers: answered.
    expect((await json(postJson(`${app.base}/mcp`, call, modernHeaders('tools/call', { 'mcp-name': 'check_trust' })))).result.structuredContent.found).toBe(true);
  });

  it('an unsupported protocol version is -32022 with HTTP 400, naming what is supported', async () => {
    const meta = { ...META, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' };
    const res = await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta } }, modernHeaders('server/discover', { 'mcp-protocol-version': '2099-01-01' }));
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error.code).toBe(-32022);
    expect(body.error.data.supported).toContain('2026-07-28');
    expect(body.error.data.requested).toBe('2099-01-01');
  });

  it('every earlier revision initializes and calls a tool on the same path', async () => {
    const doc = await json(fetch(`${app.base}/mcp`));
    expect(doc.supportedProtocolVersions).toEqual(expect.arrayContaining(['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05']));
    for (const version of ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05']) {
      const init = await json(postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'old', version: '1' } } }, MCP_HEADERS));
      expect(init.result.protocolVersion, version).toBe(version);
      expect(init.result.serverInfo.version).toBe('1.3.0');
      const headers = version >= '2025-06-18' ? { ...MCP_HEADERS, 'mcp-protocol-version': version } : MCP_HEADERS;
      const call = await json(postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'check_trust', arguments: { server: SERVER } } }, headers));
      expect(call.result.structuredContent.found, version).toBe(true);
    }
  });
});

describe('/mcp layering', () => {
  it('the MCP door calls services only: no store, no SQL, no database handle in its modules', async () => {
    for (const f of ['mcp.ts', 'mcp-server.ts', 'mcp-tools.ts', 'mcp-tool-names.ts', 'skills.ts']) {
      const src = await readFile(new URL(`../src/agents/${f}`, import.meta.url), 'utf8');
      expect(src, f).not.toMatch(/from '\.\.\/(store|db)\//);
      expect(src, f).not.toMatch(/\bSELECT\b|\bINSERT\b|\.query\(/);
    }
  });
});

describe('/mcp transport rules', () => {
  const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } } };

  it('GET without event-stream Accept is the JSON discovery document', async () => {
    const res = await fetch(`${app.base}/mcp`);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toMatch(/max-age=\d+/);
    const doc = await json(res);
    expect(doc.version).toBe('1.3.0');
    expect(doc.tools.map((t: { name: string }) => t.name).sort()).toEqual(['check_trust', 'preflight_check', 'verify_attestation']);
  });

  it('GET asking for an event stream is 405 (stateless: no server-initiated stream)', async () => {
    const res = await fetch(`${app.base}/mcp`, { headers: { accept: 'text/event-stream' } });
    expect(res.status).toBe(405);
  });

  it('a notification gets 202 with no body', async () => {
    const res = await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', method: 'notifications/initialized' }, MCP_HEADERS);
    expect(res.status).toBe(202);
    expect(await res.text()).toBe('');
  });

  it('a JSON-RPC batch is refused (MCP 2025-06-18 has no batching)', async () => {
    const res = await postJson(`${app.base}/mcp`, [init, { jsonrpc: '2.0', id: 2, method: 'ping' }], MCP_HEADERS);
    expect(res.status).toBe(400);
    expect((await json(res)).error.code).toBe(-32600);
  });

  it('a message nested absurdly deep is an invalid request, not a crash', async () => {
    const deep = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + '{"a":'.repeat(5000) + '1' + '}'.repeat(5000) + '}';
    const res = await fetch(`${app.base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', ...MCP_HEADERS }, body: deep });
    expect(res.status).toBe(400);
    expect((await json(res)).error.code).toBe(-32600);
  });

  it('malformed JSON is a JSON-RPC parse error', async () => {
    const res = await fetch(`${app.base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', ...MCP_HEADERS }, body: '{"jsonrpc":' });
    expect(res.status).toBe(400);
    expect((await json(res)).error.code).toBe(-32700);
  });

  it('a plain curl-style JSON call works (JSON response, serverInfo version)', async () => {
    const res = await postJson(`${app.base}/mcp`, init, MCP_HEADERS);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-interface-version')).toBe('1.3.0');
    expect((await json(res)).result.serverInfo.version).toBe('1.3.0');
  });

  it('a foreign Host header is refused on a loopback bind (DNS rebinding)', async () => {
    const http = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const u = new URL(`${app.base}/mcp`);
      const req = http.request({ host: u.hostname, port: u.port, path: '/mcp', method: 'POST', headers: { host: 'evil.example.com', 'content-type': 'application/json', ...MCP_HEADERS } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end(JSON.stringify(init));
    });
    expect(status).toBe(403);
  });

  it('non-MCP errors stay problem+json: body too large, wrong content type, wrong method', async () => {
    await expectProblem(await postJson(`${app.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'ping', params: { pad: 'x'.repeat(200_000) } }, MCP_HEADERS), 413, 'payload_too_large');
    await expectProblem(await fetch(`${app.base}/mcp`, { method: 'POST', headers: { 'content-type': 'text/plain', ...MCP_HEADERS }, body: 'hi' }), 415);
    await expectProblem(await fetch(`${app.base}/mcp`, { method: 'DELETE' }), 405, 'method_not_allowed');
  });

  it('POST without the required Accept is 406', async () => {
    const res = await postJson(`${app.base}/mcp`, init, { accept: 'application/json' });
    expect(res.status).toBe(406);
  });
});
