import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/index.js';
import { createScratchDatabase, type ScratchDatabase } from '../src/db/scratch.js';
import { createObservatory, type Observatory } from '../src/server.js';
import { jwkThumbprint } from '../src/signing/keyring.js';
import { json, postJson } from './support/app.js';
import { expectConfigRefusal } from './support/config.js';
import { backend } from './support/db.js';
import { activePrivateKey } from './support/keys.js';

// Issue 17 finding 3: the signing key was readable, and the database writable, by every local
// user. DATA_DIR is now 0700 with 0600 files, and private keys are sealed under a key-encryption
// secret, never stored in clear (not in signing_keys, not in PGlite's files, WAL included).

const secretA = randomBytes(32).toString('base64');
const secretB = randomBytes(32).toString('hex');

let root: string;
const scratches: ScratchDatabase[] = [];
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'obs-keys-at-rest-'));
});
afterAll(async () => {
  for (const s of scratches) await s.drop().catch(() => {});
  await rm(root, { recursive: true, force: true });
});

/** A fresh place to keep data: DATA_DIR (PGlite) or a scratch PostgreSQL database plus DATA_DIR (for a generated secret). */
async function freshData(name: string): Promise<{ dataDir: string; env: Record<string, string> }> {
  const dataDir = join(root, name, 'data');
  if (backend === 'pglite') return { dataDir, env: { DATA_DIR: dataDir } };
  const s = await createScratchDatabase(process.env.DATABASE_URL!, 'obs_test');
  scratches.push(s);
  return { dataDir, env: { DATA_DIR: dataDir, DATABASE_URL: s.url } };
}

async function start(env: Record<string, string>): Promise<{ obs: Observatory; base: string }> {
  const obs = await createObservatory(loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', ...env }), { logger: false });
  const address = await obs.listen();
  return { obs, base: `http://127.0.0.1:${new URL(address).port}` };
}

/** Every path under `dir` (itself included) whose mode lets group or others in. */
function looseEntries(dir: string): string[] {
  const loose: string[] = [];
  const visit = (p: string) => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) loose.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const n of readdirSync(p)) visit(join(p, n));
  };
  visit(dir);
  return loose;
}

/** Files under `dir` containing any of `needles`. */
function filesContaining(dir: string, needles: Buffer[]): string[] {
  const hits: string[] = [];
  const visit = (p: string) => {
    const st = lstatSync(p);
    if (st.isDirectory()) for (const n of readdirSync(p)) visit(join(p, n));
    else if (st.isFile() && needles.some((n) => readFileSync(p).includes(n))) hits.push(p);
  };
  visit(dir);
  return hits;
}

/** The private scalar of a key as it would appear in clear: its base64url text and its raw bytes. */
const needlesOf = (d: string) => [Buffer.from(d), Buffer.from(d, 'base64url')];

async function signingKeyRowsAsText(obs: Observatory): Promise<string[]> {
  return (await obs.db.query<{ t: string }>('SELECT row_to_json(s)::text AS t FROM signing_keys s')).map((r) => r.t);
}

describe(`DATA_DIR permissions (${backend})`, () => {
  it('creates DATA_DIR 0700 with 0600 files, and tightens one that existed with looser modes', async () => {
    const { dataDir, env } = await freshData('modes');
    // What an earlier version (or a 022 umask) left behind.
    mkdirSync(dataDir, { recursive: true, mode: 0o755 });
    chmodSync(dataDir, 0o755);
    writeFileSync(join(dataDir, 'notes.txt'), 'left over', { mode: 0o666 });
    chmodSync(join(dataDir, 'notes.txt'), 0o666);
    const a = await start(env); // no KEY_ENCRYPTION_KEY: outside production a secret is generated into DATA_DIR
    try {
      expect((lstatSync(dataDir).mode & 0o777).toString(8)).toBe('700');
      expect(looseEntries(dataDir)).toEqual([]);
      const secretFile = join(dataDir, 'key-encryption.key');
      expect((lstatSync(secretFile).mode & 0o777).toString(8)).toBe('600');
      expect((await fetch(`${a.base}/.well-known/jwks.json`)).status).toBe(200);
    } finally {
      await a.obs.close();
    }
    expect(looseEntries(dataDir)).toEqual([]);
    // The generated secret is reused: the sealed key opens again after a restart.
    const b = await start(env);
    try {
      expect((await json(fetch(`${b.base}/.well-known/jwks.json`))).keys).toHaveLength(1);
    } finally {
      await b.obs.close();
    }
  }, 240_000);
});

describe(`private signing keys at rest (${backend})`, () => {
  it('never stores a private key in clear: not in signing_keys, not in the data files, before or after a rotation', async () => {
    const { dataDir, env } = await freshData('sealed');
    const a = await start({ ...env, KEY_ENCRYPTION_KEY: secretA });
    const secrets: string[] = [];
    try {
      await postJson(`${a.base}/api/report`, { server_url: 'https://sealed.example.com/mcp', success: true, latency_ms: 20 });
      expect((await fetch(`${a.base}/v1/preflight?target=https://sealed.example.com/mcp`)).status).toBe(200);
      for (const row of await signingKeyRowsAsText(a.obs)) expect(row).not.toMatch(/"d"\s*:/);
      secrets.push((await activePrivateKey(a.obs.db, a.obs.kek!)).jwk.d!);
      await a.obs.services.keyring.rotate();
      expect((await fetch(`${a.base}/v1/preflight?target=https://sealed.example.com/mcp`)).status).toBe(200);
      secrets.push((await activePrivateKey(a.obs.db, a.obs.kek!)).jwk.d!);
      for (const row of await signingKeyRowsAsText(a.obs)) {
        expect(row).not.toMatch(/"d"\s*:/);
        for (const d of secrets) expect(row).not.toContain(d);
      }
      // The retired key's private half is gone, not merely sealed.
      const sealed = await a.obs.db.query<{ active: boolean; private_key_enc: string | null }>('SELECT active, private_key_enc FROM signing_keys');
      expect(sealed.filter((r) => r.private_key_enc !== null).map((r) => r.active)).toEqual([true]);
    } finally {
      await a.obs.close();
    }
    if (backend === 'pglite') expect(filesContaining(dataDir, secrets.flatMap(needlesOf))).toEqual([]);
  }, 240_000);

  it('seals a key an earlier version stored in clear, destroys retired ones, and scrubs their old bytes', async () => {
    const { dataDir, env } = await freshData('legacy');
    const config = loadConfig({ LOG_LEVEL: 'silent', ...env });
    const legacy = async () => {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const pub = publicKey.export({ format: 'jwk' }) as Record<string, string>;
      return { kid: await jwkThumbprint(pub), pub, priv: privateKey.export({ format: 'jwk' }) as Record<string, string> };
    };
    const retired = await legacy();
    const active = await legacy();
    {
      const db = await openDatabase(config);
      // Rows exactly as the version before migration 1400 wrote them: private JWKs in clear.
      await db.query('INSERT INTO signing_keys (kid, public_jwk, private_jwk, created_at, retired_at, active) VALUES ($1, $2, $3, $4, $5, false)', [
        retired.kid,
        JSON.stringify(retired.pub),
        JSON.stringify(retired.priv),
        new Date(Date.now() - 86_400_000),
        new Date(Date.now() - 3_600_000),
      ]);
      await db.query('INSERT INTO signing_keys (kid, public_jwk, private_jwk, created_at, active) VALUES ($1, $2, $3, $4, true)', [
        active.kid,
        JSON.stringify(active.pub),
        JSON.stringify(active.priv),
        new Date(Date.now() - 3_600_000),
      ]);
      await db.close();
    }
    const a = await start({ ...env, KEY_ENCRYPTION_KEY: secretA });
    try {
      for (const row of await signingKeyRowsAsText(a.obs)) {
        expect(row).not.toMatch(/"d"\s*:/);
        expect(row).not.toContain(retired.priv.d!);
        expect(row).not.toContain(active.priv.d!);
      }
      // The same key keeps signing (sealed now), the retired one stays published.
      expect((await activePrivateKey(a.obs.db, a.obs.kek!)).kid).toBe(active.kid);
      expect((await a.obs.services.receipts.issue('attestation', 'x', { n: 1 }, { persist: false })).kid).toBe(active.kid);
      const kids = (await json(fetch(`${a.base}/.well-known/jwks.json`))).keys.map((k: { kid: string }) => k.kid);
      expect(kids).toEqual([active.kid, retired.kid]);
      const priv = await a.obs.db.query<{ kid: string; private_key_enc: string | null }>('SELECT kid, private_key_enc FROM signing_keys WHERE private_key_enc IS NOT NULL');
      expect(priv.map((r) => r.kid)).toEqual([active.kid]);
    } finally {
      await a.obs.close();
    }
    if (backend === 'pglite') expect(filesContaining(dataDir, [...needlesOf(retired.priv.d!), ...needlesOf(active.priv.d!)])).toEqual([]);
  }, 240_000);
});

describe(`the key-encryption secret (${backend})`, () => {
  it('a wrong secret stops start-up with one clear line', async () => {
    const { env } = await freshData('wrong-secret');
    const secretFile = join(root, 'wrong-secret.kek');
    writeFileSync(secretFile, `${secretA}\n`, { mode: 0o600 });
    const a = await start({ ...env, KEY_ENCRYPTION_KEY_FILE: secretFile }); // the same secret, from a file
    const kid = (await activePrivateKey(a.obs.db, a.obs.kek!)).kid;
    await a.obs.close();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      env: { ...process.env, ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', OBSERVE_ENABLED: '0', KEY_ENCRYPTION_KEY: secretB },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const started = (async () => {
      for (;;) {
        if (/listening/.test(out)) return 'started';
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    try {
      const first = await Promise.race([exited, started]);
      expect(first, `the service started with the wrong secret:\n${out}${err}`).toBe(1);
      const lines = err.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^cannot start: the signing key \S+ in the database was encrypted with another key-encryption secret/);
      expect(lines[0]).toContain(kid);
      expect(lines[0]).not.toContain(secretA);
      expect(lines[0]).not.toContain(secretB);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 240_000);

  it('is required with NODE_ENV=production (unless SIGNING_KEY_JWK keeps the key out of the database)', async () => {
    const { env } = await freshData('production');
    let err: unknown;
    try {
      const a = await start({ ...env, NODE_ENV: 'production' });
      await a.obs.close();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe('KEY_ENCRYPTION_KEY');
    expect((err as Error).message).toMatch(/^KEY_ENCRYPTION_KEY: required when NODE_ENV=production/);
    const jwk = JSON.stringify(generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }));
    const b = await start({ ...env, NODE_ENV: 'production', SIGNING_KEY_JWK: jwk });
    await b.obs.close();
    const c = await start({ ...env, NODE_ENV: 'production', KEY_ENCRYPTION_KEY: secretB });
    await c.obs.close();
  }, 240_000);

  it.each([
    ['KEY_ENCRYPTION_KEY', 'short'],
    ['KEY_ENCRYPTION_KEY', randomBytes(16).toString('base64')],
    ['KEY_ENCRYPTION_KEY', randomBytes(31).toString('hex')],
  ])('refuses %s=%s with an error naming the variable', (name, value) => {
    expectConfigRefusal(name, value);
  });

  it('refuses KEY_ENCRYPTION_KEY and KEY_ENCRYPTION_KEY_FILE together, and accepts hex, base64 and base64url', () => {
    expect(() => loadConfig({ KEY_ENCRYPTION_KEY: secretA, KEY_ENCRYPTION_KEY_FILE: '/x' })).toThrow(/^KEY_ENCRYPTION_KEY: set KEY_ENCRYPTION_KEY or KEY_ENCRYPTION_KEY_FILE, not both/);
    const raw = randomBytes(32);
    for (const text of [raw.toString('hex'), raw.toString('base64'), raw.toString('base64url')]) {
      expect(loadConfig({ KEY_ENCRYPTION_KEY: text }).keyEncryptionKey).toEqual(raw);
    }
  });
});
