import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';

// /mcp with the official MCP SDK client, plus the transport rules a stock client does not exercise.

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

describe('MCP SDK client', () => {
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

  it('check_trust with bad input is a tool error, not a crash', async () => {
    const r = await client.callTool({ name: 'check_trust', arguments: { server: '' } });
    expect(r.isError).toBe(true);
    const r2 = await client.callTool({ name: 'check_trust', arguments: { server: 'x'.repeat(5000) } });
    expect(r2.isError).toBe(true);
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
