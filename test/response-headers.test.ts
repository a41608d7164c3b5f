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
});
