import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { createBundleGate, type BundleGate } from '../src/bundle-gate.js';
import { createBundleMirror } from '../src/services/bundle-gate.js';
import { signCompact } from '../src/signing/jws.js';

// Ops audit finding 3: the bundle gate published its full GATE_BUNDLE_URL, query-string tokens of
// a presigned object-store URL included, in /healthz, /readyz (bundle.source, bundle.last_error),
// the 503 detail of /v1/gate, and its logs. Only fetch may see the full URL; everything shown
// says origin and path.

const SECRETS = ['deadbeef', 'AKIAEXAMPLE', 'X-Amz', 'hunter2', 'user:', 's3cr3t'];
// Port 1 on loopback refuses the connection: the gate never gets a bundle.
const PRESIGNED = 'http://127.0.0.1:1/v1/bundle?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=deadbeef';
const WITH_USERINFO = 'http://user:hunter2@127.0.0.1:1/v1/bundle?X-Amz-Signature=deadbeef#frag';
const SHOWN = 'http://127.0.0.1:1/v1/bundle';

function expectNoSecret(what: string, text: string): void {
  for (const s of SECRETS) expect(text, `${what} shows "${s}": ${text}`).not.toContain(s);
}

const dir = mkdtempSync(join(tmpdir(), 'gate-url-secrets-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function startGate(env: Record<string, string>, fetchImpl?: typeof fetch): Promise<{ gate: BundleGate; base: string }> {
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', GATE_BUNDLE_REFRESH_SECONDS: '3600', GATE_BUNDLE_CACHE_FILE: 'off', ...env });
  const gate = await createBundleGate(config, { logger: false, fetch: fetchImpl });
  const address = await gate.listen();
  return { gate, base: `http://127.0.0.1:${new URL(address).port}` };
}

/** Everything a client sees of the gate without a bundle: /healthz, /readyz and /v1/gate (503s), bodies and headers. */
async function everythingShown(base: string): Promise<{ text: string; health: Record<string, unknown> }> {
  const parts: string[] = [];
  let health: Record<string, unknown> = {};
  for (const [path, headers] of [
    ['/healthz', {}],
    ['/readyz', {}],
    ['/v1/gate', { 'x-mcp-server': 'https://mcp.example.com/mcp' }],
  ] as const) {
    const res = await fetch(`${base}${path}`, { headers });
    expect(res.status, path).toBe(503);
    const body = await res.text();
    if (path === '/healthz') health = JSON.parse(body);
    parts.push(body, JSON.stringify([...res.headers]));
  }
  return { text: parts.join('\n'), health };
}

describe('the bundle gate never shows the query or userinfo of GATE_BUNDLE_URL', () => {
  it.each([
    ['a presigned URL (query) whose host refuses the connection', PRESIGNED, /^cannot reach http:\/\/127\.0\.0\.1:1\/v1\/bundle: /],
    ['a URL with userinfo and a query (fetch refuses it, quoting it)', WITH_USERINFO, /^cannot reach http:\/\/127\.0\.0\.1:1\/v1\/bundle: /],
  ])('%s: /healthz, /readyz and the /v1/gate 503 show origin and path only', async (_name, url, lastError) => {
    const { gate, base } = await startGate({ GATE_BUNDLE_URL: url });
    try {
      const { text, health } = await everythingShown(base);
      expectNoSecret('the gate', text);
      const bundle = health.bundle as { source: string; last_error: string };
      expect(bundle.source).toBe(SHOWN);
      expect(bundle.last_error).toMatch(lastError);
      // What serve.ts logs at start (src/serve.ts: bundle_source, last_error) is this status.
      expectNoSecret('status()', JSON.stringify(gate.mirror.status()));
    } finally {
      await gate.close();
    }
  });

  it('nor the query of a GATE_BUNDLE_JWKS URL', async () => {
    const jwksUrl = 'http://127.0.0.1:1/jwks.json?token=s3cr3t';
    const k = bundleKey();
    // The bundle is served; the pinned JWKS URL refuses the connection.
    const serve: typeof fetch = async (input, init) => (String(input) === PRESIGNED ? new Response(signedBundle(k), { status: 200 }) : fetch(input, init));
    const { gate, base } = await startGate({ GATE_BUNDLE_URL: PRESIGNED, GATE_BUNDLE_JWKS: jwksUrl }, serve);
    try {
      const { text, health } = await everythingShown(base);
      expectNoSecret('the gate', text);
      expect((health.bundle as { last_error: string }).last_error).toMatch(/^could not fetch the JWKS at http:\/\/127\.0\.0\.1:1\/jwks\.json: /);
    } finally {
      await gate.close();
    }
  });
});

// A bundle the mirror verifies: signed with a key whose JWKS the fake source serves at its origin.
function bundleKey(): { key: KeyObject; kid: string; jwks: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const kid = randomBytes(8).toString('hex');
  return { key: privateKey, kid, jwks: JSON.stringify({ keys: [{ ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' }] }) };
}

function signedBundle(k: { key: KeyObject; kid: string }): string {
  const iat = Math.floor(Date.now() / 1000);
  return signCompact(
    {
      schema: 'observatory-bundle-v1',
      kind: 'bundle',
      iss: 'http://127.0.0.1:1',
      iat,
      exp: iat + 86_400,
      jti: randomBytes(8).toString('hex'),
      bundle_id: randomBytes(8).toString('hex'),
      filters: { category: null, verdict: null },
      delta: null,
      server_count: 0,
      servers: [],
      removed: [],
    },
    k.key,
    k.kid,
  );
}

describe('what the mirror logs and keeps on disk', () => {
  let k: ReturnType<typeof bundleKey>;
  beforeAll(() => {
    k = bundleKey();
  });
  const source = (answer: 'up' | 'down'): typeof fetch =>
    (async (input: string | URL | Request) => {
      const url = String(input);
      if (answer === 'down') throw new TypeError(`fetch failed for ${url}`); // an error quoting the full URL
      if (url === 'http://127.0.0.1:1/.well-known/jwks.json') return new Response(k.jwks, { status: 200 });
      if (url.startsWith(SHOWN)) return new Response(signedBundle(k), { status: 200 });
      return new Response('not found', { status: 404 });
    }) as typeof fetch;
  const mirror = (url: string, cacheFile: string, answer: 'up' | 'down', errors: string[]) =>
    createBundleMirror({ url, jwks: null, refreshSeconds: 3600, now: () => new Date(), fetch: source(answer), cacheFile, onError: (e) => errors.push((e as Error).message) });

  it('logs (onError) and last_error without the query, even when the error quotes the full URL', async () => {
    const errors: string[] = [];
    const m = mirror(PRESIGNED, join(dir, 'none.json'), 'down', errors);
    await m.start();
    m.stop();
    expect(errors.length).toBeGreaterThan(0);
    for (const e of errors) expectNoSecret('a logged error', e);
    expect(errors[0]).toBe(`cannot reach ${SHOWN}: fetch failed for ${SHOWN}`);
    expect(m.status().last_error).toBe(errors[0]);
  });

  it('keeps the bundle on disk without the query, and uses it again only for the same full URL', async () => {
    const file = join(dir, 'kept.json');
    const first = mirror(PRESIGNED, file, 'up', []);
    await first.start();
    first.stop();
    const kept = readFileSync(file, 'utf8');
    expectNoSecret('the kept file', kept);
    expect(JSON.parse(kept).source).toBe(SHOWN);
    // Restarted while the source is down: the same URL answers from the kept bundle...
    const again = mirror(PRESIGNED, file, 'down', []);
    await again.start();
    again.stop();
    expect(again.usable(new Date())).not.toBeNull();
    // ...the same path with another query (another object, or other filters) does not.
    const errors: string[] = [];
    const other = mirror(`${SHOWN}?category=finance`, file, 'down', errors);
    await other.start();
    other.stop();
    expect(other.usable(new Date())).toBeNull();
    expect(errors.join('\n')).toContain('with another query or userinfo than GATE_BUNDLE_URL has now');
  });
});
