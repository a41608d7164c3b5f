import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// The app under test runs with the default policy (no ALLOW_PRIVATE_TARGETS): every probe
// endpoint must refuse loopback and the other private ranges before sending a packet there.
let strict: TestApp;
let site: http.Server;
let siteBase: string;
let hits = 0;
beforeAll(async () => {
  site = http.createServer((_req, res) => {
    hits++;
    res.end('{}');
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
  siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  strict = await startTestApp();
});
afterAll(async () => {
  site.closeAllConnections();
  await new Promise((r) => site.close(r));
  await strict?.close();
});

const q = (base: string, path: string, params: Record<string, string>) => fetch(`${base}${path}?${new URLSearchParams(params)}`);

describe(`SSRF refusals with the default policy (${backend})`, () => {
  it('refuses loopback targets on every probe endpoint with 400 target_refused saying why', async () => {
    for (const [path, params] of [
      ['/api/agent-readiness', { url: siteBase }],
      ['/api/agency-checklist', { url: `${siteBase}/mcp` }],
      ['/v1/compliance', { server: `${siteBase}/mcp` }],
      ['/api/agent-readiness', { url: 'http://169.254.169.254/' }],
      ['/api/agent-readiness', { url: 'http://[::ffff:127.0.0.1]/' }],
      ['/api/agent-readiness', { url: 'http://10.0.0.1/' }],
    ] as const) {
      const p = await expectProblem(await q(strict.base, path, params), 400, 'target_refused');
      expect(String(p.detail)).toMatch(/loopback|metadata|IPv4-mapped|RFC 1918/);
    }
    // drift: a tracked loopback server is refused too
    await postJson(`${strict.base}/api/report`, { server_url: `${siteBase}/mcp`, success: true, latency_ms: 1 });
    const p = await expectProblem(await q(strict.base, '/api/drift', { server: `${siteBase}/mcp` }), 400, 'target_refused');
    expect(String(p.detail)).toContain('ALLOW_PRIVATE_TARGETS');
    expect(hits).toBe(0); // not one request reached the loopback target
  });
});

