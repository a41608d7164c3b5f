import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Issue 22 item 3: a trust answer's size is part of its cost. CORS headers (the expose list is
// ~300 bytes) go only to requests with an Origin (browsers always send one cross-origin); every
// answer says `Vary: Origin` so a shared cache keeps the two variants apart.

describe(`response headers (${backend})`, () => {
  let t: TestApp;
  const URL = 'https://headers.example.com/mcp';
  beforeAll(async () => {
    t = await startTestApp();
    await postJson(`${t.base}/api/report`, { server_url: URL, success: true, latency_ms: 20 });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it('a client without Origin gets no CORS headers; a browser gets all of them; both get Vary: Origin and the interface headers', async () => {
    const path = `/api/trust?url=${encodeURIComponent(URL)}`;
    const plain = await fetch(`${t.base}${path}`);
    expect(plain.status).toBe(200);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
    expect(plain.headers.get('access-control-expose-headers')).toBeNull();
    expect(plain.headers.get('vary')?.toLowerCase()).toContain('origin');
    expect(plain.headers.get('x-interface-version')).toBeTruthy();
    expect(plain.headers.get('x-request-id')).toBeTruthy();
    const browser = await fetch(`${t.base}${path}`, { headers: { origin: 'https://app.example' } });
    expect(browser.headers.get('access-control-allow-origin')).toBe('*');
    expect(browser.headers.get('access-control-expose-headers')).toContain('X-Request-Id');
    expect(browser.headers.get('vary')?.toLowerCase()).toContain('origin');
    // The same record (computed_at may differ: the score cache is dropped when the report is folded).
    const [b, p] = (await Promise.all([browser.json(), plain.json()])) as [Record<string, unknown>, Record<string, unknown>];
    expect(b.server).toEqual(p.server);
    expect(b.metrics).toEqual(p.metrics);
  }, 60_000);

  it('answers a browser preflight on any path, refuses an OPTIONS with an Origin but no method asked, and leaves the gate its own OPTIONS', async () => {
    const origin = 'https://app.example';
    // A POST-only path: the preflight is answered before routing matters.
    const pre = await fetch(`${t.base}/api/report`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,payment-signature' } });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('content-length')).toBe('0');
    expect(pre.headers.get('access-control-allow-origin')).toBe('*');
    expect(pre.headers.get('access-control-allow-methods')).toContain('POST');
    expect(pre.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('payment-signature');
    expect(pre.headers.get('access-control-max-age')).toBe('7200');
    expect(pre.headers.get('vary')?.toLowerCase()).toContain('origin');
    // Also on a path no route has.
    expect((await fetch(`${t.base}/no/such/path`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'GET' } })).status).toBe(204);
    // Not a preflight: problem+json, with the CORS headers so that the browser can read it.
    const bad = await fetch(`${t.base}/api/report`, { method: 'OPTIONS', headers: { origin } });
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toContain('application/problem+json');
    expect(bad.headers.get('access-control-allow-origin')).toBe('*');
    expect(((await bad.json()) as { code: string }).code).toBe('invalid_argument');
    // Without an Origin an OPTIONS is no CORS request: the router answers it (405 with Allow here).
    const plain = await fetch(`${t.base}/api/report`, { method: 'OPTIONS' });
    expect(plain.status).toBe(405);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
    // OPTIONS on the gate is a gateway asking about an OPTIONS request: the gate decides.
    const gate = await fetch(`${t.base}/v1/gate`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'GET', 'x-mcp-server': URL } });
    expect(gate.status).toBe(200);
    expect(gate.headers.get('x-trust-verdict')).toBeTruthy();
    expect(gate.headers.get('access-control-allow-origin')).toBe('*');
    expect(gate.headers.get('access-control-allow-methods')).toBeNull();
  }, 60_000);
});
