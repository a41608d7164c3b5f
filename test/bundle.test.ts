import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPublicKey, generateKeyPairSync, sign as edSign, verify as edVerify } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { readFileSync } from 'node:fs';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { keysOfJwks, verifyBundle } from '../src/signing/bundle.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { seedVerdicts } from './support/seed.js';
import { backend } from './support/db.js';

// GET /v1/bundle over real sockets, checked by a verifier that shares no code with the service
// (node:crypto Ed25519 on the compact JWS), against the checked-in JSON Schema.

const PASS = 'https://pass.bundle.example.com/mcp';
const FAIL = 'https://fail.bundle.example.com/mcp';
const UNCERTAIN = 'https://uncertain.bundle.example.com/mcp';
const MOVER = 'https://mover.bundle.example.com/mcp';

let t: TestApp;
beforeAll(async () => {
  // BUNDLE_CACHE_SECONDS=0: every request reads the cached scores again (new reports show at once).
  // The bundle's rate limit is tested in test/rate-limit.test.ts; here it would cut the file short.
  t = await startTestApp({ BUNDLE_CACHE_SECONDS: '0', RATE_LIMIT_BUNDLE_PER_MINUTE: '0' });
  await seedVerdicts(t.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
  await postJson(`${t.base}/api/report`, { server_url: MOVER, success: true, latency_ms: 40 });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

const b64json = (part: string) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));

/** An independent verifier: node:crypto only, the JWKS as published, nothing from src/. */
function independentVerify(jws: string, jwks: { keys: { kid: string; x: string; crv: string; kty: string }[] }, nowS = Math.floor(Date.now() / 1000)) {
  const [h, p, s] = jws.split('.');
  const header = b64json(h!);
  if (header.alg !== 'EdDSA') return { ok: false as const, why: 'alg' };
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  if (!jwk || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') return { ok: false as const, why: 'unknown kid' };
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
  if (!edVerify(null, Buffer.from(`${h}.${p}`), key, Buffer.from(s!, 'base64url'))) return { ok: false as const, why: 'signature' };
  const payload = b64json(p!);
  if (!(payload.iat <= nowS + 60 && nowS < payload.exp)) return { ok: false as const, why: 'time' };
  return { ok: true as const, payload };
}

async function jwks() {
  return json(fetch(`${t.base}/.well-known/jwks.json`));
}

/** A raw GET (no automatic decompression), to see exactly what goes over the wire. */
function rawGet(path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${t.base}${path}`, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const addFormats = addFormatsModule as unknown as (a: Ajv) => Ajv;
function schemaValidators() {
  const schema = JSON.parse(readFileSync(new URL('../docs/schemas/bundle.schema.json', import.meta.url), 'utf8'));
  const ajv = addFormats(new Ajv({ allErrors: true, strict: false }));
  ajv.addSchema(schema, 'bundle');
  return { file: ajv.getSchema('bundle')!, payload: ajv.getSchema('bundle#/definitions/payload')! };
}

describe(`GET /v1/bundle (${backend})`, () => {
  it('is one signed document of every tracked server, verified offline by node:crypto against the JWKS', async () => {
    const res = await fetch(`${t.base}/v1/bundle`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const file = await json(res);
    expect(file.format).toBe('observatory-bundle-v1');
    const v = independentVerify(file.jws, await jwks());
    expect(v).toMatchObject({ ok: true });
    const p = v.ok ? v.payload : null;
    expect(p).toMatchObject({ kind: 'bundle', schema: 'observatory-bundle-v1', iss: t.config.publicBaseUrl, delta: null, removed: [], bundle_id: file.bundle_id });
    expect(p.exp - p.iat).toBe(86_400);
    expect(p.server_count).toBe(p.servers.length);
    const byUrl = new Map(p.servers.map((s: { url: string }) => [s.url, s]));
    expect(byUrl.get(PASS)).toMatchObject({ verdict: 'PASS', total_interactions: 20, tier: 'Unrated', anomaly_flags: [], drift: { tool_manifest_drift: false } });
    expect((byUrl.get(PASS) as { trust_score: number }).trust_score).toBeGreaterThanOrEqual(60);
    expect(byUrl.get(FAIL)).toMatchObject({ verdict: 'FAIL' });
    expect((byUrl.get(FAIL) as { trust_score: number }).trust_score).toBeLessThan(40);
    expect(byUrl.get(UNCERTAIN)).toMatchObject({ total_interactions: 1 });
    // The same verdicts pre-flight gives.
    for (const url of [PASS, FAIL, UNCERTAIN]) {
      const pf = await json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(url)}`));
      expect((byUrl.get(url) as { verdict: string }).verdict, url).toBe(pf.verdict);
      expect((byUrl.get(url) as { trust_score: number | null }).trust_score, url).toBe(pf.trust_score ?? null);
    }
    // The service's own verifier agrees, with the keys of the file itself or of the JWKS.
    const keys = keysOfJwks(file.jwks);
    expect(keys).toBeInstanceOf(Map);
    expect(await verifyBundle(file.jws, keys as Map<string, never>, new Date())).toMatchObject({ valid: true });
  });

  it('matches the checked-in JSON Schema (file and signed payload)', async () => {
    const { file, payload } = schemaValidators();
    const doc = await json(fetch(`${t.base}/v1/bundle`));
    expect(file(doc), JSON.stringify(file.errors)).toBe(true);
    expect(payload(b64json(doc.jws.split('.')[1])), JSON.stringify(payload.errors)).toBe(true);
    const filtered = await json(fetch(`${t.base}/v1/bundle?verdict=FAIL,PASS&category=general`));
    expect(payload(b64json(filtered.jws.split('.')[1])), JSON.stringify(payload.errors)).toBe(true);
    // The schema is not vacuous: a wrong verdict or a missing member fails it.
    const bad = b64json(doc.jws.split('.')[1]);
    bad.servers[0].verdict = 'MAYBE';
    expect(payload(bad)).toBe(false);
    const { jws: _jws, ...noJws } = doc;
    expect(file(noJws)).toBe(false);
  });

  it('is compressed as asked (br, gzip) and plain otherwise, with Vary', async () => {
    const plain = await rawGet('/v1/bundle');
    expect(plain.headers['content-encoding']).toBeUndefined();
    const doc = JSON.parse(plain.body.toString('utf8'));
    const gz = await rawGet('/v1/bundle', { 'accept-encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gz.headers.vary).toMatch(/accept-encoding/i);
    expect(JSON.parse(gunzipSync(gz.body).toString('utf8')).bundle_id).toBe(doc.bundle_id);
    const br = await rawGet('/v1/bundle', { 'accept-encoding': 'gzip;q=0.5, br' });
    expect(br.headers['content-encoding']).toBe('br');
    expect(JSON.parse(brotliDecompressSync(br.body).toString('utf8')).jws).toBe(JSON.parse(gunzipSync(gz.body).toString('utf8')).jws);
    const refused = await rawGet('/v1/bundle', { 'accept-encoding': 'br;q=0, gzip;q=0' });
    expect(refused.headers['content-encoding']).toBeUndefined();
    expect(gz.body.length).toBeLessThan(plain.body.length);
  });

  it('has one strong ETag per content coding: a cache revalidating its variants cannot mix them up', async () => {
    const tags = new Map<string, string>();
    for (const enc of ['gzip', 'br', 'identity']) {
      const r = await rawGet('/v1/bundle', { 'accept-encoding': enc });
      tags.set(enc, String(r.headers.etag));
      // Revalidating with the ETag of another coding is not a match: the right variant is sent.
      const other = enc === 'gzip' ? 'br' : 'gzip';
      if (tags.has(other)) expect((await rawGet('/v1/bundle', { 'accept-encoding': enc, 'if-none-match': tags.get(other)! })).status).toBe(200);
      expect((await rawGet('/v1/bundle', { 'accept-encoding': enc, 'if-none-match': tags.get(enc)! })).status).toBe(304);
    }
    expect(new Set(tags.values()).size).toBe(3);
    expect(tags.get('gzip')).toBe(`${tags.get('identity')!.slice(0, -1)}-gzip"`);
  });

  it('has a strong ETag answered 304 on If-None-Match while nothing changed, and a new one after new evidence', async () => {
    const first = await fetch(`${t.base}/v1/bundle`);
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"[0-9a-f]{16}(-gzip|-br)?"$/);
    await first.arrayBuffer();
    const again = await fetch(`${t.base}/v1/bundle`);
    expect(again.headers.get('etag')).toBe(etag);
    await again.arrayBuffer();
    const notModified = await fetch(`${t.base}/v1/bundle`, { headers: { 'if-none-match': `"0000000000000000", W/${etag}` } });
    expect(notModified.status).toBe(304);
    expect((await notModified.arrayBuffer()).byteLength).toBe(0);
    expect(notModified.headers.get('etag')).toBe(etag);
    const stale = await fetch(`${t.base}/v1/bundle`, { headers: { 'if-none-match': '"0000000000000000"' } });
    expect(stale.status).toBe(200);
    await stale.arrayBuffer();
    await postJson(`${t.base}/api/report`, { server_url: PASS, success: true, latency_ms: 41 });
    const changed = await fetch(`${t.base}/v1/bundle`, { headers: { 'if-none-match': etag } });
    expect(changed.status).toBe(200);
    expect(changed.headers.get('etag')).not.toBe(etag);
    const p = b64json((await json(changed)).jws.split('.')[1]);
    expect(p.servers.find((s: { url: string }) => s.url === PASS).total_interactions).toBe(21);
  });

  it('filters by verdict and category, and refuses values it does not know with 400 problem+json', async () => {
    const fails = b64json((await json(fetch(`${t.base}/v1/bundle?verdict=FAIL`))).jws.split('.')[1]);
    expect(fails.filters).toEqual({ category: null, verdict: ['FAIL'] });
    expect(fails.servers.map((s: { url: string }) => s.url)).toEqual([FAIL]);
    const two = b64json((await json(fetch(`${t.base}/v1/bundle?verdict=fail,pass`))).jws.split('.')[1]);
    expect(two.filters.verdict).toEqual(['PASS', 'FAIL']);
    expect(two.servers.map((s: { url: string }) => s.url).sort()).toEqual([FAIL, PASS].sort());
    const weather = b64json((await json(fetch(`${t.base}/v1/bundle?category=weather`))).jws.split('.')[1]);
    expect(weather.servers.every((s: { category: string }) => s.category === 'weather')).toBe(true);
    for (const q of ['verdict=MAYBE', 'verdict=', 'verdict=PASS,', 'category=nonsense', 'category=', 'since=xyz', 'since=ABCDEF0123456789', `verdict=${'P'.repeat(100)}`]) {
      await expectProblem(await fetch(`${t.base}/v1/bundle?${q}`), 400, 'invalid_argument');
    }
  });

  it('answers ?since=<earlier bundle_id> with a signed delta: changed and new entries, and the URLs that left', async () => {
    const before = await json(fetch(`${t.base}/v1/bundle?category=general`));
    const beforeP = b64json(before.jws.split('.')[1]);
    expect(beforeP.servers.map((s: { url: string }) => s.url)).toContain(MOVER);
    // MOVER leaves `general` (a weather tool reclassifies it), PASS changes, NEW arrives.
    await postJson(`${t.base}/api/report`, { server_url: MOVER, success: true, latency_ms: 40, tool_name: 'get_weather_forecast' });
    await postJson(`${t.base}/api/report`, { server_url: PASS, success: true, latency_ms: 42 });
    const NEW = 'https://new.bundle.example.com/mcp';
    await postJson(`${t.base}/api/report`, { server_url: NEW, success: true, latency_ms: 40 });
    const after = await json(fetch(`${t.base}/v1/bundle?category=general`));
    expect(after.bundle_id).not.toBe(before.bundle_id);

    const res = await fetch(`${t.base}/v1/bundle?category=general&since=${before.bundle_id}`);
    expect(res.status).toBe(200);
    const delta = await json(res);
    expect(delta.delta).toEqual({ since: before.bundle_id });
    const v = independentVerify(delta.jws, await jwks());
    expect(v.ok).toBe(true);
    const p = v.ok ? v.payload : null;
    expect(p.delta).toEqual({ since: before.bundle_id });
    expect(p.bundle_id).toBe(after.bundle_id);
    expect(p.removed).toEqual([MOVER]);
    const changed = p.servers.map((s: { url: string }) => s.url).sort();
    expect(changed).toEqual([NEW, PASS].sort());
    expect(p.server_count).toBe(b64json(after.jws.split('.')[1]).server_count);
    // Applying the delta to the earlier bundle gives the current one.
    const state = new Map(beforeP.servers.map((s: { url: string }) => [s.url, s]));
    for (const u of p.removed) state.delete(u);
    for (const s of p.servers) state.set(s.url, s);
    const afterP = b64json(after.jws.split('.')[1]);
    expect([...state.values()].sort((a, b) => ((a as { url: string }).url < (b as { url: string }).url ? -1 : 1))).toEqual(afterP.servers);
    // Against itself: an empty delta.
    const none = b64json((await json(fetch(`${t.base}/v1/bundle?category=general&since=${after.bundle_id}`))).jws.split('.')[1]);
    expect(none).toMatchObject({ servers: [], removed: [] });
    // An id never issued (or no longer kept): 404; an id of other filters: 400.
    await expectProblem(await fetch(`${t.base}/v1/bundle?category=general&since=0123456789abcdef`), 404, 'not_found');
    await expectProblem(await fetch(`${t.base}/v1/bundle?since=${after.bundle_id}`), 400, 'invalid_argument');
  });

  it('answers many filter sets asked at once (built one at a time), each signed for its own filters', async () => {
    const qs = ['PASS', 'FAIL', 'UNCERTAIN', 'UNRATED', 'PASS,FAIL', 'FAIL,UNRATED', 'PASS,UNCERTAIN', 'UNCERTAIN,FAIL', 'PASS,UNRATED', 'UNCERTAIN,UNRATED', 'PASS,FAIL,UNRATED', 'PASS,UNCERTAIN,FAIL'];
    const keys = await jwks();
    const docs = await Promise.all(qs.map((v) => fetch(`${t.base}/v1/bundle?verdict=${v}`).then((r) => json(r))));
    for (const [i, d] of docs.entries()) {
      const v = independentVerify(d.jws, keys);
      expect(v.ok, qs[i]).toBe(true);
      const want = qs[i]!.split(',');
      expect(v.ok && v.payload.servers.every((s: { verdict: string }) => want.includes(s.verdict)), qs[i]).toBe(true);
    }
  });

  it('refuses a tampered, expired or foreign-signed bundle', async () => {
    const file = await json(fetch(`${t.base}/v1/bundle`));
    const published = await jwks();
    const keys = keysOfJwks(published) as Map<string, never>;
    const [h, p, s] = file.jws.split('.') as [string, string, string];
    const payload = b64json(p);

    // Tampering: one verdict changed, the signature kept.
    const tamperedPayload = { ...payload, servers: payload.servers.map((e: { url: string }) => (e.url === FAIL ? { ...e, verdict: 'PASS', trust_score: 99 } : e)) };
    const tampered = `${h}.${Buffer.from(JSON.stringify(tamperedPayload)).toString('base64url')}.${s}`;
    expect(independentVerify(tampered, published)).toEqual({ ok: false, why: 'signature' });
    expect(await verifyBundle(tampered, keys, new Date())).toMatchObject({ valid: false, reason: 'signature does not verify' });

    // Expiry: the same bundle read after its exp.
    const later = new Date((payload.exp + 1) * 1000);
    expect(independentVerify(file.jws, published, payload.exp + 1)).toEqual({ ok: false, why: 'time' });
    const expired = await verifyBundle(file.jws, keys, later);
    expect(expired.valid).toBe(false);
    expect(!expired.valid && expired.reason).toMatch(/^bundle expired at /);

    // A foreign key: the same claims signed by another key, under our kid and under its own.
    const foreign = generateKeyPairSync('ed25519');
    const signWith = (kid: string) => {
      const fh = Buffer.from(JSON.stringify({ alg: 'EdDSA', kid, typ: 'JWT' })).toString('base64url');
      const input = `${fh}.${p}`;
      return `${input}.${edSign(null, Buffer.from(input), foreign.privateKey).toString('base64url')}`;
    };
    const kid = b64json(h).kid as string;
    expect(independentVerify(signWith(kid), published)).toEqual({ ok: false, why: 'signature' });
    expect(await verifyBundle(signWith(kid), keys, new Date())).toMatchObject({ valid: false, reason: 'signature does not verify' });
    expect(await verifyBundle(signWith('someone-else'), keys, new Date())).toMatchObject({ valid: false, reason: 'unknown key id someone-else' });

    // A receipt is signed by the same key but is not a bundle.
    const pf = await json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(PASS)}`));
    const notBundle = await verifyBundle(pf.diligence_receipt, keys, new Date());
    expect(!notBundle.valid && notBundle.reason).toMatch(/not an observatory bundle/);
  });
});

describe(`BUNDLE_CACHE_MAX_ENTRIES: built bundles and deltas kept in memory (${backend})`, () => {
  let small: TestApp;
  beforeAll(async () => {
    // Two of each kept; BUNDLE_CACHE_SECONDS=0, so every request reads the scores again and an
    // unchanged state keeps its signed bytes (same ETag) only while its build is still kept.
    small = await startTestApp({ BUNDLE_CACHE_MAX_ENTRIES: '2', BUNDLE_CACHE_SECONDS: '0', RATE_LIMIT_BUNDLE_PER_MINUTE: '0' });
    await seedVerdicts(small.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
  }, 120_000);
  afterAll(async () => {
    await small?.close();
  });

  it('keeps at most that many filter sets: a third drops the oldest, which is then signed again', async () => {
    expect(small.config.bundle.cacheMaxEntries).toBe(2);
    const get = (verdict: string, since?: string) => small.obs.services.bundle.get(since === undefined ? { verdict } : { verdict, since });
    const pass = await get('PASS');
    const fail = await get('FAIL');
    // Both kept: the same state is served with the same bytes.
    expect((await get('PASS')).etag).toBe(pass.etag);
    expect((await get('FAIL')).etag).toBe(fail.etag);
    // A third filter set drops the oldest (PASS, set again before FAIL was).
    await get('UNCERTAIN');
    const passAgain = await get('PASS');
    expect(passAgain.bundleId).toBe(pass.bundleId);
    expect(passAgain.etag).not.toBe(pass.etag);

    // Deltas likewise: two kept, a third drops the oldest.
    const ids = { PASS: passAgain.bundleId, FAIL: fail.bundleId, UNCERTAIN: (await get('UNCERTAIN')).bundleId };
    const d1 = await get('PASS', ids.PASS);
    expect((await get('PASS', ids.PASS)).etag).toBe(d1.etag);
    await get('FAIL', ids.FAIL);
    await get('UNCERTAIN', ids.UNCERTAIN);
    const d1Again = await get('PASS', ids.PASS);
    expect(d1Again.bundleId).toBe(d1.bundleId);
    expect(d1Again.etag).not.toBe(d1.etag);
  }, 60_000);
});
