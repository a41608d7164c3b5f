import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { readToolManifest } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher } from '../src/probes/safe-fetch.js';
import { startHttpStub, startMcpTarget } from './support/mcp-target.js';

// Finding 13 (issue 17): a target that answers an MCP request with an SSE body larger than the
// safe client's size cap must be refused as too large at once (502 upstream_error naming the
// cap), not left to run into the probe's deadline (504).

let t: TestApp;
let stub: Awaited<ReturnType<typeof startHttpStub>>;
let sseStub: Awaited<ReturnType<typeof startHttpStub>>;
beforeAll(async () => {
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
  stub = await startHttpStub((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(405).end();
    // An event stream that never ends: 2 MiB of comment lines, then silence with the socket open.
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const line = `: ${'x'.repeat(1022)}\n`;
    for (let i = 0; i < 2048; i++) res.write(line);
  });
  // An HTTP+SSE server: POST to its stream URL is refused (so the probe falls back to SSE), its
  // GET stream names the message endpoint and then floods past the cap.
  sseStub = await startHttpStub((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('event: endpoint\ndata: /messages?sessionId=1\n\n');
      const line = `: ${'x'.repeat(1022)}\n`;
      for (let i = 0; i < 2048; i++) res.write(line);
      return;
    }
    if ((req.url ?? '').startsWith('/messages')) return void res.writeHead(202).end();
    res.writeHead(405).end();
  });
  for (const url of [stub.url, sseStub.url]) expect((await postJson(`${t.base}/api/report`, { server_url: url, success: true, latency_ms: 5 })).status).toBe(200);
});
afterAll(async () => {
  await sseStub?.close();
  await stub?.close();
  await t?.close();
});

describe(`an MCP target streaming an SSE body over the size cap (${backend})`, () => {
  it('is refused as too large (502), not reported as a timeout (504)', async () => {
    const res = await fetch(`${t.base}/api/drift?server=${encodeURIComponent(stub.url)}`);
    const body = await expectProblem(res, 502, 'upstream_error');
    expect(String(body.detail)).toMatch(/cap/);
  }, 60_000);

  it('over the HTTP+SSE transport too (the GET event stream goes over the cap)', async () => {
    const res = await fetch(`${t.base}/api/drift?server=${encodeURIComponent(sseStub.url)}`);
    const body = await expectProblem(res, 502, 'upstream_error');
    expect(String(body.detail)).toMatch(/cap/);
  }, 60_000);

  it('but the optional side stream of a Streamable HTTP server going over the cap does not fail a probe that got its answers', async () => {
    const target = await startMcpTarget([{ name: 'ping', inputSchema: { type: 'object' } }], 2, { floodGetStream: true, listDelayMs: 1500 });
    try {
      const m = await readToolManifest(createSafeFetcher({ allowPrivate: true }), target.url);
      expect(m.tools.map((x) => x.name)).toEqual(['ping']);
    } finally {
      await target.close();
    }
  }, 60_000);
});
