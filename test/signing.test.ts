import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { calculateJwkThumbprint, compactVerify, createLocalJWKSet } from 'jose';
import { openKeyRing, rotateSigningKey } from '../src/signing/keyring.js';
import { createReceiptIssuer } from '../src/signing/receipts.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { json, startTestApp } from './support/app.js';
import { testKek as kek } from './support/keys.js';

const now = () => new Date('2026-11-25T12:00:00Z');
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

describe(`key ring (${backend})`, () => {
  it('generates one key on first open, persists it, and names it by its RFC 7638 thumbprint', async () => {
    const a = await openKeyRing(t.db, { signingKeyJwk: null, kek, now });
    const b = await openKeyRing(t.db, { signingKeyJwk: null, kek, now });
    const ja = await a.jwks();
    expect(ja.keys).toHaveLength(1);
    expect(await b.jwks()).toEqual(ja);
    const k = ja.keys[0]!;
    expect(k).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    expect(k.kid).toBe(await calculateJwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: k.x }, 'sha256'));
    expect(JSON.stringify(ja)).not.toMatch(/"d"/);
  });

  it('signs receipts that any JOSE library verifies, and keeps verifying them after rotation', async () => {
    const ring = await openKeyRing(t.db, { signingKeyJwk: null, kek, now });
    const issuer = createReceiptIssuer({ db: t.db, keyring: ring, issuer: 'https://obs.example', now });
    const r = await issuer.issue('preflight', 'https://s.example.com', { verdict: 'PASS', trust_score: 80 });
    expect(r.receiptId).toMatch(/^[0-9a-f]{16}$/);
    expect(r.payload).toMatchObject({ iss: 'https://obs.example', sub: 'https://s.example.com', jti: r.receiptId, kind: 'preflight', verdict: 'PASS', iat: Date.parse('2026-11-25T12:00:00Z') / 1000 });
    const stored = await issuer.get(r.receiptId);
    expect(stored?.jws).toBe(r.jws);

    const oldKid = r.kid;
    const newKid = await rotateSigningKey(t.db, { kek, now: now() });
    await ring.refresh();
    expect(newKid).not.toBe(oldKid);
    const r2 = await issuer.issue('preflight', 'https://s.example.com', { verdict: 'FAIL' });
    expect(r2.kid).toBe(newKid);
    const jwks = await ring.jwks();
    expect(jwks.keys.map((k) => k.kid)).toEqual([newKid, oldKid]);
    const keyset = createLocalJWKSet(jwks as never);
    for (const jws of [r.jws, r2.jws]) {
      const v = await compactVerify(jws, keyset, { algorithms: ['EdDSA', 'Ed25519'] });
      expect(v.protectedHeader).toMatchObject({ alg: 'EdDSA', typ: 'JWT' });
      expect((await issuer.verify(jws)).valid).toBe(true);
    }
    // Another instance opened later sees the rotated key as active.
    const other = await openKeyRing(t.db, { signingKeyJwk: null, kek, now });
    expect((await other.sign({ a: 1 })).kid).toBe(newKid);
  });

  it('refuses tampered tokens and unknown keys', async () => {
    const ring = await openKeyRing(t.db, { signingKeyJwk: null, kek, now });
    const issuer = createReceiptIssuer({ db: t.db, keyring: ring, issuer: 'https://obs.example', now });
    const { jws } = await issuer.issue('attestation', 'x', { score: 1 }, { persist: false });
    const [h, p, s] = jws.split('.') as [string, string, string];
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p, 'base64url').toString()), score: 100 })).toString('base64url');
    expect(await issuer.verify(`${h}.${forged}.${s}`)).toMatchObject({ valid: false });
    const foreign = generateKeyPairSync('ed25519');
    const ring2 = await openKeyRing((await createTestDatabase()).db, { signingKeyJwk: JSON.stringify(foreign.privateKey.export({ format: 'jwk' })), kek, now });
    const alien = (await ring2.sign({ a: 1 })).jws;
    expect(await issuer.verify(alien)).toMatchObject({ valid: false, reason: expect.stringContaining('unknown key') });
  });

  it('signs with a key supplied as SIGNING_KEY_JWK and publishes it', async () => {
    const tdb = await createTestDatabase();
    try {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const pub = publicKey.export({ format: 'jwk' });
      const ring = await openKeyRing(tdb.db, { signingKeyJwk: JSON.stringify(privateKey.export({ format: 'jwk' })), kek, now });
      const kid = await calculateJwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: pub.x }, 'sha256');
      expect((await ring.sign({ a: 1 })).kid).toBe(kid);
      expect((await ring.jwks()).keys.map((k) => k.kid)).toEqual([kid]);
      const rows = await tdb.db.query<{ private_jwk: unknown; private_key_enc: unknown }>('SELECT private_jwk, private_key_enc FROM signing_keys');
      expect(rows[0]!.private_jwk).toBeNull();
      expect(rows[0]!.private_key_enc).toBeNull();
    } finally {
      await tdb.drop();
    }
  });

  it.runIf(backend === 'postgres')('instances starting together agree on one key', async () => {
    const tdb = await createTestDatabase();
    const { openPostgres } = await import('../src/db/postgres.js');
    const dbs = [openPostgres(tdb.url!), openPostgres(tdb.url!), openPostgres(tdb.url!)];
    try {
      const rings = await Promise.all(dbs.map((db) => openKeyRing(db, { signingKeyJwk: null, kek, now })));
      const kids = await Promise.all(rings.map(async (r) => (await r.sign({})).kid));
      expect(new Set(kids).size).toBe(1);
    } finally {
      for (const db of dbs) await db.close();
      await tdb.drop();
    }
  });

  it('publishes the JWKS over HTTP with a cache lifetime', async () => {
    const app = await startTestApp();
    try {
      const res = await fetch(`${app.base}/.well-known/jwks.json`);
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toMatch(/max-age=\d+/);
      const body = await json(res);
      expect(body.keys).toHaveLength(1);
      expect(body.keys[0].kty).toBe('OKP');
    } finally {
      await app.close();
    }
  });
});
