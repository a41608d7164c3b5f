import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkCommand } from '../src/cli/check.js';
import { runCli } from '../src/cli.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

let t: TestApp;
let target: http.Server;
let targetUrl: string;
beforeAll(async () => {
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
  target = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
  targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}/mcp`;
});
afterAll(async () => {
  target.closeAllConnections();
  await new Promise((r) => target.close(r));
  await t?.close();
});

function io(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l), env, fetch: globalThis.fetch } };
}

describe(`observatory check (${backend})`, () => {
  it('prints the attestation and exits with ci.exit_code', async () => {
    const x = io({ OBSERVATORY_URL: t.base });
    const code = await checkCommand([targetUrl], x.io);
    expect(code).toBe(1); // plain http, no auth: FAIL
    expect(x.out[0]).toMatch(/^FAIL agency-mcp-2026 for http:\/\/127\.0\.0\.1/);
    expect(x.out.some((l) => /FAIL\s+transport/.test(l))).toBe(true);
    expect(x.out.at(-1)).toMatch(/receipt [0-9a-f]{16}/);
    const viaCli = io({ OBSERVATORY_URL: t.base });
    expect(await runCli(['check', targetUrl], viaCli.io)).toBe(1);
    expect(viaCli.out[0]).toMatch(/^FAIL agency-mcp-2026/);
    const j = io();
    expect(await checkCommand([targetUrl, '--observatory', t.base, '--json'], j.io)).toBe(1);
    expect(JSON.parse(j.out.join('\n')).ci.exit_code).toBe(1);
  });

  it('exits 3 when the check cannot be made', async () => {
    const none = io();
    expect(await checkCommand([], none.io)).toBe(3);
    expect(none.err[0]).toMatch(/usage/);
    const bad = io({ OBSERVATORY_URL: t.base });
    expect(await checkCommand(['not a url'], bad.io)).toBe(3);
    expect(bad.err[0]).toMatch(/400 invalid_argument/);
    const std = io({ OBSERVATORY_URL: t.base });
    expect(await checkCommand([targetUrl, '--standard', 'other'], std.io)).toBe(3);
    expect(await checkCommand([targetUrl, '--bogus'], io().io)).toBe(3);
    const down = io({ OBSERVATORY_URL: 'http://127.0.0.1:1' });
    expect(await checkCommand([targetUrl], down.io)).toBe(3);
    expect(down.err[0]).toMatch(/cannot reach/);
  });
});
