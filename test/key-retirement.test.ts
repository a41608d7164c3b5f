import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrivateKey, generateKeyPairSync, randomBytes, sign as edSign, type KeyObject } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { loadConfig } from '../src/config.js';
import { createScratchDatabase, type ScratchDatabase } from '../src/db/scratch.js';
import { createObservatory, type Observatory } from '../src/server.js';
import { EXIT, runCli, type CliIo } from '../src/cli.js';
import { jwkThumbprint } from '../src/signing/keyring.js';
import { json, postJson } from './support/app.js';
import { backend } from './support/db.js';
import { TEST_KEK_TEXT, testKek } from './support/keys.js';

// Issue 17 findings 10 and 11. A retired key verifies only what it signed before its retirement
// (DECISIONS.md), nothing verifies with an issue time in the future beyond a small skew, a revoked
// key verifies nothing, a retired private key is destroyed, and a signature has one spelling:
// non-canonical base64url in any of the three segments is refused. Every verification path is
// asked: REST /v1/verify, Connect Verify, MCP verify_attestation, the stored-receipt lookups
// (/v1/receipt/{id}, /v1/verify-receipt) and the offline CLI.

const b64u = (x: string | Buffer) => Buffer.from(x).toString('base64url');
const HOUR = 3_600_000;

let dir: string;
let scratch: ScratchDatabase | null = null;
let dbEnv: Record<string, string>;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'obs-retire-'));
  dbEnv = { DATA_DIR: join(dir, 'data') };
  if (backend === 'postgres') {
    scratch = await createScratchDatabase(process.env.DATABASE_URL!, 'obs_test');
    dbEnv.DATABASE_URL = scratch.url;
  }
}, 120_000);
afterAll(async () => {
  await scratch?.drop().catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

async function start(env: Record<string, string>, now?: () => Date): Promise<{ obs: Observatory; base: string }> {
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', KEY_ENCRYPTION_KEY: TEST_KEK_TEXT, ...dbEnv, ...env });
  const obs = await createObservatory(config, { logger: false, now });
  const address = await obs.listen();
  return { obs, base: `http://127.0.0.1:${new URL(address).port}` };
}

function cli(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { out: (l) => out.push(l), err: (l) => err.push(l), env: { LOG_LEVEL: 'silent', KEY_ENCRYPTION_KEY: TEST_KEK_TEXT, ...dbEnv, ...env } };
  return { io, out, err };
}

/** A token of ours in every respect but its signer and issue time (what a holder of the private key can make). */
function forge(key: KeyObject, kid: string, iatSeconds: number, jti = randomBytes(8).toString('hex')): string {
  const input = `${b64u(JSON.stringify({ alg: 'EdDSA', kid, typ: 'JWT' }))}.${b64u(JSON.stringify({ iss: 'https://forger', sub: 'https://s.example.com', iat: iatSeconds, jti, kind: 'preflight', verdict: 'PASS', trust_score: 99 }))}`;
  return `${input}.${b64u(edSign(null, Buffer.from(input), key))}`;
}

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
/** The same bytes spelled with non-zero trailing bits in the last character (null when the segment has none). */
function respell(segment: string, bits: number): string | null {
  const spare = segment.length % 4 === 2 ? 4 : segment.length % 4 === 3 ? 2 : 0;
  if (spare === 0) return null;
  const v = ALPHABET.indexOf(segment.at(-1)!);
  const alt = (v & ~((1 << spare) - 1)) | (bits & ((1 << spare) - 1));
  if (alt === v) return null;
  return segment.slice(0, -1) + ALPHABET[alt];
}

/** Asks every verification path about each token; returns, per token, whether each path said valid. */
async function askEverywhere(base: string, tokens: Record<string, string>, jwksFile: string, obs: Observatory) {
  const connect = createClient(ReceiptService, createConnectTransport({ baseUrl: base, httpVersion: '1.1' }));
  const mcp = new Client({ name: 'retirement-test', version: '1.0.0' });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  const answers: Record<string, Record<string, boolean>> = {};
  try {
    for (const [name, jws] of Object.entries(tokens)) {
      // Stored as a receipt of ours under the jti it carries, so the stored-receipt paths re-verify it live.
      const [h, p] = jws.split('.') as [string, string];
      const payload = JSON.parse(Buffer.from(p, 'base64url').toString()) as { jti: string; iat: number; sub: string };
      const kid = (JSON.parse(Buffer.from(h, 'base64url').toString()) as { kid: string }).kid;
      await obs.db.query('INSERT INTO receipts (receipt_id, kind, sub, issued_at, kid, claim, jws) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING', [
        payload.jti,
        'preflight',
        payload.sub,
        new Date(payload.iat * 1000),
        kid,
        JSON.stringify(payload),
        jws,
      ]);
      const rest = await fetch(`${base}/v1/verify?jws=${encodeURIComponent(jws)}`);
      await rest.arrayBuffer();
      const viaConnect = await connect.verify({ jws }).then(
        (r) => r.valid,
        () => false,
      );
      const viaMcp = ((await mcp.callTool({ name: 'verify_attestation', arguments: { jws } })).structuredContent as { valid: boolean }).valid;
      const stored = (await json(fetch(`${base}/v1/receipt/${payload.jti}`))).verification.valid as boolean;
      const verifyReceipt = (await json(fetch(`${base}/v1/verify-receipt?id=${payload.jti}`))).valid as boolean;
      const c = cli();
      const offline = (await runCli(['verify', jws, '--jwks', jwksFile], c.io)) === EXIT.ok;
      answers[name] = { rest: rest.status === 200, connect: viaConnect, mcp: viaMcp, receipt: stored, verifyReceipt, cli: offline };
    }
  } finally {
    await mcp.close();
  }
  return answers;
}

const everywhere = (valid: boolean) => ({ rest: valid, connect: valid, mcp: valid, receipt: valid, verifyReceipt: valid, cli: valid });

describe(`retired keys and issue times (${backend})`, () => {
  it('a retired key verifies only what it signed before its retirement; nothing verifies from the future; one spelling per signature', async () => {
    const pair = () => {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      return { key: privateKey, jwk: JSON.stringify(privateKey.export({ format: 'jwk' })), pub: publicKey.export({ format: 'jwk' }) as Record<string, string> };
    };
    const k1 = pair();
    const k2 = pair();
    const kid1 = await jwkThumbprint(k1.pub);
    const kid2 = await jwkThumbprint(k2.pub);
    // The service's clock starts two hours back, so "after the retirement" is still in the past of the real clock (the CLI's).
    const t0 = Date.now() - 2 * HOUR;
    let clock = t0;
    const now = () => new Date(clock);

    // K1 signs a real pre-flight receipt, then the operator moves to K2 (SIGNING_KEY_JWK) ten minutes later.
    const a = await start({ SIGNING_KEY_JWK: k1.jwk }, now);
    await postJson(`${a.base}/api/report`, { server_url: 'https://retire.example.com/mcp', success: true, latency_ms: 30 });
    const genuine = await json(fetch(`${a.base}/v1/preflight?target=https://retire.example.com/mcp`));
    expect(genuine.diligence_receipt.split('.')[0]).toBe(b64u(JSON.stringify({ alg: 'EdDSA', kid: kid1, typ: 'JWT' })));
    await a.obs.close();
    clock = t0 + 10 * 60_000;
    const b = await start({ SIGNING_KEY_JWK: k2.jwk }, now);
    try {
      clock = t0 + HOUR;
      const jwks = await json(fetch(`${b.base}/.well-known/jwks.json`));
      expect(jwks.keys.map((k: { kid: string }) => k.kid)).toEqual([kid2, kid1]);
      const jwksFile = join(dir, 'jwks.json');
      await writeFile(jwksFile, JSON.stringify(jwks));

      const sec = (ms: number) => Math.floor(ms / 1000);
      const yearAhead = sec(Date.now() + 365 * 24 * HOUR);
      const s = genuine.diligence_receipt.split('.')[2] as string;
      const tokens: Record<string, string> = {
        'the genuine receipt (control)': genuine.diligence_receipt,
        'K1, signed before its retirement (control)': forge(k1.key, kid1, sec(t0 + 60_000)),
        'K2, the active key, now (control)': forge(k2.key, kid2, sec(clock)),
        'K1, signed after its retirement': forge(k1.key, kid1, sec(t0 + 30 * 60_000)),
        'K1, dated a year ahead': forge(k1.key, kid1, yearAhead),
        'K2, dated a year ahead': forge(k2.key, kid2, yearAhead),
        'K2, dated ten minutes ahead': forge(k2.key, kid2, sec(Date.now() + 10 * 60_000)),
      };
      // Non-canonical spellings of a valid signature (each token its own jti, so the stored-receipt
      // paths re-verify exactly that spelling), and of the other two segments.
      const respelledSignature = (name: string, change: (sig: string) => string | null) => {
        const [fh, fp, fs] = forge(k2.key, kid2, sec(clock)).split('.') as [string, string, string];
        const alt = change(fs);
        if (alt) tokens[name] = `${fh}.${fp}.${alt}`;
      };
      respelledSignature('signature, trailing bits 0001', (sig) => respell(sig, 1));
      respelledSignature('signature, trailing bits 1111', (sig) => respell(sig, 15));
      respelledSignature('signature with = padding', (sig) => `${sig}==`);
      respelledSignature('signature in the base64 alphabet', (sig) => (/[-_]/.test(sig) ? sig.replace(/-/g, '+').replace(/_/g, '/') : null));
      expect(respell(s, 1)).not.toBe(s); // the genuine receipt's signature has spare bits too
      // Header and payload respelled: re-sign so only the spelling is wrong (a holder of the key could).
      const spelled = (seg: 'h' | 'p') => {
        const base = forge(k2.key, kid2, sec(clock), randomBytes(8).toString('hex'));
        const [fh, fp] = base.split('.') as [string, string];
        const alt = respell(seg === 'h' ? fh : fp, 1);
        if (!alt) return null;
        const input = seg === 'h' ? `${alt}.${fp}` : `${fh}.${alt}`;
        return `${input}.${b64u(edSign(null, Buffer.from(input), k2.key))}`;
      };
      for (const seg of ['h', 'p'] as const) {
        const v = spelled(seg);
        if (v) tokens[`${seg === 'h' ? 'header' : 'payload'} with non-zero trailing bits`] = v;
      }
      expect(Object.keys(tokens).length).toBeGreaterThanOrEqual(10);

      const answers = await askEverywhere(b.base, tokens, jwksFile, b.obs);
      const expected = Object.fromEntries(Object.keys(tokens).map((name) => [name, everywhere(name.endsWith('(control)'))]));
      expect(answers).toEqual(expected);
      // The JWKS says when K1 retired (what the offline CLI went by): ten minutes after t0, plus the rotation grace.
      const retiredEntry = jwks.keys.find((k: { kid: string }) => k.kid === kid1);
      expect(retiredEntry.exp).toBeGreaterThanOrEqual(Math.floor((t0 + 10 * 60_000) / 1000));
      expect(retiredEntry.exp).toBeLessThan(Math.floor((t0 + 30 * 60_000) / 1000));
      expect(jwks.keys[0]).not.toHaveProperty('exp');
      // The reason is told.
      const retired = await json(fetch(`${b.base}/v1/verify?jws=${tokens['K1, signed after its retirement']}`));
      expect(retired.detail).toMatch(/retired at/);
      const future = await json(fetch(`${b.base}/v1/verify?jws=${tokens['K2, dated a year ahead']}`));
      expect(future.detail).toMatch(/in the future/);
      const respelled = await json(fetch(`${b.base}/v1/verify?jws=${tokens['signature, trailing bits 0001']}`));
      expect(respelled.detail).toMatch(/canonical base64url/);
    } finally {
      await b.obs.close();
    }
  }, 300_000);
});

/** The private key of `kid` as stored, whatever the storage (clear or sealed), or null when none is kept. */
async function storedPrivate(obs: Observatory, kid: string): Promise<Record<string, string> | null> {
  const [row] = await obs.db.query<Record<string, unknown>>('SELECT * FROM signing_keys WHERE kid = $1', [kid]);
  if (!row) throw new Error(`no row for ${kid}`);
  if (row.private_jwk) return row.private_jwk as Record<string, string>;
  if (row.private_key_enc) return testKek.open(kid, row.private_key_enc as string);
  return null;
}

describe(`keys rotate and keys revoke (${backend})`, () => {
  it('rotation destroys the retired private key; a revoked key leaves the JWKS and verifies nothing; revoking the active key makes a new one', async () => {
    const kidOf = (jws: string) => (JSON.parse(Buffer.from(jws.split('.')[0]!, 'base64url').toString()) as { kid: string }).kid;
    const env = { DATA_DIR: join(dir, 'revoke-data'), ...(scratch ? {} : {}) };
    let revokeScratch: ScratchDatabase | null = null;
    if (backend === 'postgres') {
      revokeScratch = await createScratchDatabase(process.env.DATABASE_URL!, 'obs_test');
      Object.assign(env, { DATABASE_URL: revokeScratch.url });
    }
    try {
      const a = await start(env);
      let first: { receipt_id: string; diligence_receipt: string };
      let k1: Record<string, string> | null;
      try {
        await postJson(`${a.base}/api/report`, { server_url: 'https://revoke.example.com/mcp', success: true, latency_ms: 30 });
        first = await json(fetch(`${a.base}/v1/preflight?target=https://revoke.example.com/mcp`));
        k1 = await storedPrivate(a.obs, kidOf(first.diligence_receipt));
      } finally {
        await a.obs.close();
      }
      const kid1 = kidOf(first.diligence_receipt);
      expect(k1).not.toBeNull();

      const rot = cli(env);
      expect(await runCli(['keys', 'rotate'], rot.io)).toBe(EXIT.ok);
      const kid2 = /new active signing key: (\S+)/.exec(rot.out.join('\n'))![1]!;

      const b = await start(env);
      try {
        // The retired key's private half is gone; what it signed before stays valid.
        expect(await storedPrivate(b.obs, kid1)).toBeNull();
        expect((await fetch(`${b.base}/v1/verify?jws=${first.diligence_receipt}`)).status).toBe(200);
      } finally {
        await b.obs.close();
      }

      const rev = cli(env);
      expect(await runCli(['keys', 'revoke', kid1], rev.io)).toBe(EXIT.ok);
      expect(rev.out.join('\n')).toContain(`revoked signing key: ${kid1}`);
      const again = cli(env);
      expect(await runCli(['keys', 'revoke', kid1], again.io)).toBe(EXIT.invalid);
      expect(again.err.join('\n')).toMatch(/already revoked/);
      const unknown = cli(env);
      expect(await runCli(['keys', 'revoke', 'no-such-kid'], unknown.io)).toBe(EXIT.invalid);
      expect(unknown.err.join('\n')).toMatch(/no signing key no-such-kid/);

      const c = await start(env);
      try {
        const jwks = await json(fetch(`${c.base}/.well-known/jwks.json`));
        expect(jwks.keys.map((k: { kid: string }) => k.kid)).toEqual([kid2]);
        expect((await fetch(`${c.base}/v1/verify?jws=${first.diligence_receipt}`)).status).toBe(422);
        expect((await json(fetch(`${c.base}/v1/receipt/${first.receipt_id}`))).verification.valid).toBe(false);
        const forged = forge(createPrivateKey({ key: k1!, format: 'jwk' }), kid1, Math.floor(Date.now() / 1000) - 60);
        expect((await fetch(`${c.base}/v1/verify?jws=${forged}`)).status).toBe(422);
        const did = await json(fetch(`${c.base}/.well-known/did.json`));
        expect(did.verificationMethod.map((v: { publicKeyJwk: { kid: string } }) => v.publicKeyJwk.kid)).toEqual([kid2]);
      } finally {
        await c.obs.close();
      }

      // Revoking the active key: a new key becomes active at once.
      const revActive = cli(env);
      expect(await runCli(['keys', 'revoke', kid2], revActive.io)).toBe(EXIT.ok);
      const kid3 = /new active signing key: (\S+)/.exec(revActive.out.join('\n'))?.[1];
      expect(kid3).toBeTruthy();
      const d = await start(env);
      try {
        const jwks = await json(fetch(`${d.base}/.well-known/jwks.json`));
        expect(jwks.keys.map((k: { kid: string }) => k.kid)).toEqual([kid3]);
        const next = await json(fetch(`${d.base}/v1/preflight?target=https://revoke.example.com/mcp`));
        expect(kidOf(next.diligence_receipt)).toBe(kid3);
        expect((await fetch(`${d.base}/v1/verify?jws=${next.diligence_receipt}`)).status).toBe(200);
      } finally {
        await d.obs.close();
      }
    } finally {
      await revokeScratch?.drop().catch(() => {});
    }
  }, 300_000);
});
