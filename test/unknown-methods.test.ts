// Methods nobody routes (audit of 2026-11-28). HTTP/2 carries any token in `:method`; fastify's
// router answered such a request with a 500, an error log with a stack trace and a warning that
// printed the route tree, and counted it nowhere. Now: 501 problem+json before fastify. Methods
// node knows but a route does not take (PURGE, over HTTP/1.1 or HTTP/2) stay a 405 problem.
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { request } from 'node:http';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 120_000);
afterAll(async () => t?.close());

/** One HTTP/2 (h2c) request; its status, content type and body. */
function h2(method: string, path: string): Promise<{ status: number; type: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(t.base);
    session.on('error', reject);
    const req = session.request({ ':method': method, ':path': path });
    let status = 0;
    let type: string | undefined;
    let body = '';
    req.on('response', (h) => {
      status = Number(h[':status']);
      type = h['content-type'] as string | undefined;
    });
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      session.close();
      resolve({ status, type, body });
    });
    req.on('error', reject);
    req.end();
  });
}

describe(`methods nobody routes (${backend})`, () => {
  it.each(['FOO', 'BREW', 'X-ANYTHING'])('HTTP/2 %s: 501 problem+json, not a 500', async (method) => {
    for (const path of ['/api/trust?url=https://a.example/mcp', '/nope', '/']) {
      const r = await h2(method, path);
      expect(r.status, `${method} ${path}: ${r.body}`).toBe(501);
      expect(r.type).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(r.body)).toMatchObject({ status: 501, code: 'unimplemented', detail: expect.stringContaining(method) });
    }
  });

  it('a method node knows that a route does not take is a 405 problem, the same over HTTP/2 and HTTP/1.1', async () => {
    const r = await h2('PURGE', '/api/trust');
    expect(r.status).toBe(405);
    expect(r.type).toMatch(/^application\/problem\+json/);
    const url = new URL(t.base);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, path: '/api/trust', method: 'PURGE' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(405);
  });

  it('known methods are served as before over HTTP/2', async () => {
    const r = await h2('GET', '/healthz');
    expect(r.status).toBe(200);
  });
});
