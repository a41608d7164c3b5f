import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHmac, createPrivateKey, createPublicKey, generateKeyPairSync, sign as edSign, type KeyObject } from 'node:crypto';
import { Code, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { verifyCompact, verifyCompactWithKey } from '../src/signing/jws.js';
import { expectProblem, json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { activePrivateKey } from './support/keys.js';

// What an outside reviewer throws at a JWS verifier. Every forged token must be 422, never 200, never 500.

const b64u = (x: string | Buffer) => Buffer.from(x).toString('base64url');
const enc = (o: object) => b64u(JSON.stringify(o));

let t: TestApp;
let ourKey: KeyObject;
let ourKid: string;
let ourX: string;
let genuine: string;

beforeAll(async () => {
  t = await startTestApp();
  const active = await activePrivateKey(t.obs.db, t.obs.kek!);
  ourKid = active.kid;
  ourKey = active.key;
  ourX = active.jwk.x!;
  genuine = (await json(fetch(`${t.base}/v1/preflight?target=https://sec.example.com/mcp`))).diligence_receipt;
}, 180_000);
afterAll(async () => {
  await t?.close();
});

/** Signs any header with OUR real private key: the strongest form of each attack. */
function signWithOurKey(header: object, payload: object = { iss: 'x', jti: '0123456789abcdef', iat: Math.floor(Date.now() / 1000) }): string {
  const input = `${enc(header)}.${enc(payload)}`;
  return `${input}.${b64u(edSign(null, Buffer.from(input), ourKey))}`;
}

const verifyHttp = (jws: string) => fetch(`${t.base}/v1/verify?jws=${encodeURIComponent(jws)}`);

describe(`JWS verification under attack (${backend})`, () => {
  it('RFC 8037 appendix A.4 test vector verifies with its key (and fails when altered)', () => {
    // RFC 8037 A.1 key (public part, A.2) and the A.4 signature over "Example of Ed25519 signing".
    const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' }, format: 'jwk' });
    const vector =
      'eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg';
    const ok = verifyCompactWithKey(vector, key);
    expect(ok.valid).toBe(true);
    if (ok.valid) {
      expect(ok.header).toEqual({ alg: 'EdDSA' });
      expect(ok.payload.toString('utf8')).toBe('Example of Ed25519 signing');
    }
    // The RFC's private key signs to exactly the published signature (Ed25519 is deterministic).
    const priv = createPrivateKey({
      key: { kty: 'OKP', crv: 'Ed25519', d: 'nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' },
      format: 'jwk',
    });
    const [h, p, s] = vector.split('.');
    expect(b64u(edSign(null, Buffer.from(`${h}.${p}`), priv))).toBe(s);
    expect(verifyCompactWithKey(`${h}.${b64u('Example of Ed25519 signinG')}.${s}`, key).valid).toBe(false);
    // Our receipt verifier refuses it: it carries no kid, so it is not one of ours.
    return expect(verifyCompact(vector, async () => ({ key, retiredAt: null }), { now: new Date() })).resolves.toMatchObject({ valid: false, reason: expect.stringMatching(/kid|JSON/) });
  });

  it('accepts a genuine receipt (control)', async () => {
    expect((await verifyHttp(genuine)).status).toBe(200);
    expect((await verifyHttp(signWithOurKey({ alg: 'EdDSA', kid: ourKid }))).status).toBe(200);
    expect((await verifyHttp(signWithOurKey({ alg: 'Ed25519', kid: ourKid }))).status).toBe(200);
  });

  const forged: [string, () => string][] = [
    ['alg none, no signature', () => `${enc({ alg: 'none', kid: ourKid })}.${genuine.split('.')[1]}.`],
    ['alg none with the genuine signature', () => `${enc({ alg: 'none', kid: ourKid })}.${genuine.split('.')[1]}.${genuine.split('.')[2]}`],
    [
      'HS256 keyed with our public key bytes (algorithm confusion)',
      () => {
        const input = `${enc({ alg: 'HS256', kid: ourKid, typ: 'JWT' })}.${genuine.split('.')[1]}`;
        return `${input}.${b64u(createHmac('sha256', Buffer.from(ourX, 'base64url')).update(input).digest())}`;
      },
    ],
    [
      'HS256 keyed with our public key PEM (algorithm confusion)',
      () => {
        const pem = createPublicKey(ourKey).export({ type: 'spki', format: 'pem' });
        const input = `${enc({ alg: 'HS256', kid: ourKid, typ: 'JWT' })}.${genuine.split('.')[1]}`;
        return `${input}.${b64u(createHmac('sha256', pem).update(input).digest())}`;
      },
    ],
    [
      'tampered header',
      () => {
        const [, p, s] = genuine.split('.');
        return `${enc({ alg: 'EdDSA', kid: ourKid, typ: 'JWT', extra: 1 })}.${p}.${s}`;
      },
    ],
    [
      'tampered payload',
      () => {
        const [h, p, s] = genuine.split('.');
        const claim = JSON.parse(Buffer.from(p!, 'base64url').toString());
        return `${h}.${enc({ ...claim, verdict: 'PASS', trust_score: 100 })}.${s}`;
      },
    ],
    [
      'unknown kid (a stranger key)',
      () => {
        const { privateKey } = generateKeyPairSync('ed25519');
        const input = `${enc({ alg: 'EdDSA', kid: 'stranger', typ: 'JWT' })}.${enc({ jti: '0123456789abcdef' })}`;
        return `${input}.${b64u(edSign(null, Buffer.from(input), privateKey))}`;
      },
    ],
    ['our signature under a different kid', () => signWithOurKey({ alg: 'EdDSA', kid: 'not-our-kid' })],
    ['crit header (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, crit: ['exp'], exp: 1 })],
    ['b64:false (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, b64: false, crit: ['b64'] })],
    ['b64:false without crit (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, b64: false })],
    [
      'embedded jwk of the attacker',
      () => {
        const { privateKey, publicKey } = generateKeyPairSync('ed25519');
        const jwk = publicKey.export({ format: 'jwk' });
        const input = `${enc({ alg: 'EdDSA', kid: ourKid, jwk })}.${enc({ jti: '0123456789abcdef' })}`;
        return `${input}.${b64u(edSign(null, Buffer.from(input), privateKey))}`;
      },
    ],
    ['embedded jwk, even signed by our key', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, jwk: createPublicKey(ourKey).export({ format: 'jwk' }) })],
    ['jku header (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, jku: 'http://127.0.0.1:1/jwks.json' })],
    ['x5u header (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, x5u: 'http://127.0.0.1:1/cert.pem' })],
    ['x5c header (signed by our key)', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid, x5c: ['MIIB'] })],
    ['alg ES256 (signed by our key)', () => signWithOurKey({ alg: 'ES256', kid: ourKid })],
    ['alg as an array', () => signWithOurKey({ alg: ['EdDSA'], kid: ourKid })],
    ['payload that is not an object (signed by our key)', () => `${enc({ alg: 'EdDSA', kid: ourKid })}.${b64u('"x"')}.${b64u(edSign(null, Buffer.from(`${enc({ alg: 'EdDSA', kid: ourKid })}.${b64u('"x"')}`), ourKey))}`],
    ['truncated signature', () => genuine.slice(0, -10)],
    ['two parts', () => genuine.split('.').slice(0, 2).join('.')],
    ['four parts', () => `${genuine}.x`],
    ['JWE-shaped (five parts)', () => 'a.b.c.d.e'],
    ['not base64url', () => 'ey!!.ey$$.%%'],
    ['header not JSON', () => `${b64u('{not json')}.${genuine.split('.')[1]}.${genuine.split('.')[2]}`],
    ['garbage', () => 'hello'],
    ['just dots', () => '..'],
    ['over 10 KiB', () => signWithOurKey({ alg: 'EdDSA', kid: ourKid }, { pad: 'x'.repeat(11 * 1024) })],
    ['1 MiB token', () => 'a'.repeat(1024 * 1024) + '.b.c'],
  ];

  for (const [name, make] of forged) {
    it(`answers 422 invalid_signature: ${name}`, async () => {
      const res = await verifyHttp(make());
      const body = await expectProblem(res, 422, 'invalid_signature');
      expect(String(body.detail)).toMatch(/does not verify/);
    });
  }

  it('answers 400 when jws is missing or empty, and refuses forged tokens over Connect too', async () => {
    await expectProblem(await fetch(`${t.base}/v1/verify`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/verify?jws=`), 400, 'invalid_argument');
    const client = createClient(ReceiptService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    for (const [name, make] of forged.slice(0, 14)) {
      await expect(client.verify({ jws: make() }), name).rejects.toMatchObject({ code: Code.InvalidArgument });
    }
    expect((await client.verify({ jws: genuine })).valid).toBe(true);
  });
});
