import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { loadConfig } from '../src/config.js';
import { createBundleGate, type BundleGate } from '../src/bundle-gate.js';
import { postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { findNginx, NGINX_START_MS, nginxGateConf, startMcpServer, startNginx } from './support/nginx.js';

// A real nginx with auth_request to a database-less gate that answers from the source
// observatory's bundle (GATE_BUNDLE_URL), in front of a real MCP server called by the official
// SDK client; the decisions hold after the source observatory is stopped.

const nginxBin = findNginx();
if (!nginxBin) console.log('SKIP test/bundle.nginx.test.ts: nginx is not installed (apt-get install -y nginx-light); .ci/run installs it');

describe.skipIf(!nginxBin)(`nginx auth_request to a gate answering from a bundle (${backend} source)`, () => {
  let source: TestApp;
  let sourceUp = true;
  let gate: BundleGate;
  let mcp: { server: Server; port: number };
  let nginx: Awaited<ReturnType<typeof startNginx>>;
  let upstream: string;

  beforeAll(async () => {
    [source, mcp] = await Promise.all([startTestApp(), startMcpServer()]);
    upstream = `http://127.0.0.1:${mcp.port}`;
    for (let i = 0; i < 20; i++) {
      expect((await postJson(`${source.base}/api/report`, { server_url: `${upstream}/pass/mcp`, success: true, latency_ms: 40, tool_name: 'echo' })).status).toBe(200);
      expect((await postJson(`${source.base}/api/report`, { server_url: `${upstream}/fail/mcp`, success: false, latency_ms: 4000, tool_name: 'echo', http_status: 500 })).status).toBe(200);
    }
    // The gate: no DATABASE_URL, no DATA_DIR use, no key; only the bundle URL.
    const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', GATE_BUNDLE_URL: `${source.base}/v1/bundle`, GATE_BUNDLE_REFRESH_SECONDS: '3600', GATE_BUNDLE_CACHE_FILE: 'off' });
    gate = await createBundleGate(config, { logger: false });
    const gateBase = `http://127.0.0.1:${new URL(await gate.listen()).port}`;
    expect(gate.mirror.status().state).toBe('fresh');
    nginx = await startNginx(nginxBin!, (dir, port) => nginxGateConf(dir, port, gateBase, upstream, { passHeaders: ['x-trust-verdict', 'x-trust-score', 'x-trust-bundle', 'x-trust-bundle-age'] }));
  }, NGINX_START_MS + 120_000);

  afterAll(async () => {
    await nginx?.stop();
    await gate?.close();
    await new Promise((r) => mcp?.server.close(r));
    if (sourceUp) await source?.close();
    if (nginx) rmSync(nginx.dir, { recursive: true, force: true });
  });

  function client(path: string) {
    const seen: Headers[] = [];
    const transport = new StreamableHTTPClientTransport(new URL(`${nginx.base}${path}`), {
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        seen.push(res.headers);
        return res;
      },
    });
    return { mcpClient: new Client({ name: 'bundle-gate-test', version: '1.0.0' }), transport, seen };
  }

  async function scenario() {
    // PASS: the MCP client reaches its server through nginx.
    const ok = client('/pass/mcp');
    await ok.mcpClient.connect(ok.transport);
    const result = await ok.mcpClient.callTool({ name: 'echo', arguments: { text: 'from a bundle' } });
    expect(result.content).toEqual([{ type: 'text', text: 'echo: from a bundle' }]);
    await ok.mcpClient.close();
    const decided = ok.seen.filter((h) => h.get('x-trust-verdict'));
    expect(decided.length).toBeGreaterThanOrEqual(2);
    for (const h of decided) {
      expect(h.get('x-trust-verdict')).toBe('PASS');
      expect(Number(h.get('x-trust-score'))).toBeGreaterThanOrEqual(60);
      expect(h.get('x-trust-bundle')).toMatch(/^[0-9a-f]{16}$/);
      expect(h.get('x-trust-bundle-age')).toMatch(/^\d+$/);
    }
    // FAIL: refused with 403 before the server sees anything.
    const no = client('/fail/mcp');
    const err = await no.mcpClient.connect(no.transport).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(String(err?.message)).toMatch(/403/);
    expect(no.seen[0]!.get('x-trust-verdict')).toBe('FAIL');
    // UNRATED (the gateway URL itself, never reported): denied by default.
    const anon = await fetch(`${nginx.base}/anon/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-mcp-server': `${upstream}/pass/mcp` }, body: '{}' });
    expect(anon.status).toBe(403);
    expect(anon.headers.get('x-trust-verdict')).toBe('UNRATED');
    expect(anon.headers.get('x-trust-score')).toBe('null');
  }

  it('lets PASS through, refuses FAIL and UNRATED, from the bundle', async () => {
    await scenario();
  });

  it('goes on deciding the same after the source observatory is stopped', async () => {
    await source.close();
    sourceUp = false;
    await gate.mirror.refresh();
    expect(gate.mirror.status()).toMatchObject({ state: 'stale' });
    await scenario();
    expect(readFileSync(join(nginx.dir, 'error.log'), 'utf8')).not.toMatch(/\[(emerg|alert|crit)\]/);
  });
});
