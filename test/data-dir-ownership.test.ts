import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { createScratchDatabase, type ScratchDatabase } from '../src/db/scratch.js';
import { createObservatory } from '../src/server.js';
import { createBundleMirror } from '../src/services/bundle-gate.js';
import { signCompact } from '../src/signing/jws.js';
import { backend } from './support/db.js';

// Ops audit finding 1: DATA_DIR, or an entry in it, made by another local user was used as it was
// (only what this user owns was tightened), so a DATA_DIR/pglite made 0777 by `nobody` received
// the database and a key-encryption.key planted by `nobody` became the sealing secret; the gate's
// bundle cache file and its directory were read and written whoever owned them. Each must now be
// this user's and not a symbolic link, or start-up stops with one line naming the path.
//
// The cases hand entries to another user (uid 65534, `nobody`) with chown, which only root may do.

const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;
if (!isRoot) {
  console.log(
    `test/data-dir-ownership.test.ts: not running as root (uid ${process.getuid?.() ?? 'none'}): the cases that chown entries to another user (uid ${NOBODY}) are SKIPPED; run the file as root to check them`,
  );
}

let root: string;
const scratches: ScratchDatabase[] = [];
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'obs-data-dir-owner-'));
});
afterAll(async () => {
  for (const s of scratches) await s.drop().catch(() => {});
  await rm(root, { recursive: true, force: true });
});

/** DATA_DIR and the environment that uses it (a scratch PostgreSQL database too on that backend). No KEY_ENCRYPTION_KEY: the secret is generated into DATA_DIR. */
async function fresh(name: string): Promise<{ base: string; dataDir: string; env: Record<string, string> }> {
  const base = join(root, name);
  mkdirSync(base, { recursive: true });
  const dataDir = join(base, 'data');
  if (backend === 'pglite') return { base, dataDir, env: { DATA_DIR: dataDir } };
  const s = await createScratchDatabase(process.env.DATABASE_URL!, 'obs_test');
  scratches.push(s);
  return { base, dataDir, env: { DATA_DIR: dataDir, DATABASE_URL: s.url } };
}

const baseEnv = { PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0' };

/** Starts the service in-process; the error that stopped it, or null when it started (then it is closed again). */
async function startupError(env: Record<string, string>): Promise<Error | null> {
  let obs;
  try {
    obs = await createObservatory(loadConfig({ ...baseEnv, ...env }), { logger: false });
    await obs.listen();
  } catch (err) {
    await obs?.close().catch(() => {});
    return err as Error;
  }
  await obs.close();
  return null;
}

/** Expects start-up refused with the one-line data-directory error whose message matches `message`. */
function expectRefusal(err: Error | null, message: RegExp): void {
  expect(err, 'the service started').not.toBeNull();
  expect(err!.name, err!.stack).toBe('DataDirError');
  expect(err!.message).not.toContain('\n');
  expect(err!.message).toMatch(message);
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Runs `src/main.ts` (what `npm start` runs) with `env`; its exit code, or 'started' when it listened. */
async function runMain(env: Record<string, string>): Promise<{ outcome: number | null | 'started'; out: string; err: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    env: { ...process.env, ...baseEnv, LOG_LEVEL: 'info', ...env }, // info: 'listening' shows that it started
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let polling = true;
  const started = (async () => {
    while (polling) {
      if (/listening/.test(out)) return 'started' as const;
      await new Promise((r) => setTimeout(r, 250));
    }
    return 'started' as const;
  })();
  try {
    const outcome = await Promise.race([exited, started]);
    return { outcome, out, err };
  } finally {
    polling = false;
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

function owned(path: string, uid: number, mode: number): void {
  chmodSync(path, mode);
  chownSync(path, uid, uid);
}

describe.skipIf(!isRoot)(`DATA_DIR made or planted by another user (${backend})`, () => {
  it('refuses a DATA_DIR another user owns (0777, nobody)', async () => {
    const { dataDir, env } = await fresh('foreign-data-dir');
    mkdirSync(dataDir);
    owned(dataDir, NOBODY, 0o777);
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(dataDir)} is owned by uid ${NOBODY}, not by this process's user \\(uid 0\\)`));
    expect(readdirSync(dataDir)).toEqual([]); // nothing of ours was written into it
  }, 120_000);

  it('refuses a DATA_DIR/pglite another user made in a loose DATA_DIR of ours, and writes nothing into it', async () => {
    // The audit's held-cwd reproduction: root's DATA_DIR 0777, `nobody` made pglite/ in it.
    const { dataDir, env } = await fresh('foreign-pglite');
    mkdirSync(dataDir);
    chmodSync(dataDir, 0o777);
    const pglite = join(dataDir, 'pglite');
    mkdirSync(pglite);
    owned(pglite, NOBODY, 0o777);
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(pglite)} is owned by uid ${NOBODY}`));
    expect(readdirSync(pglite)).toEqual([]);
    expect(lstatSync(dataDir).mode & 0o777).toBe(0o700); // our own DATA_DIR is still tightened
  }, 120_000);

  it('refuses a key-encryption.key another user planted, instead of sealing the signing key with it', async () => {
    const { dataDir, env } = await fresh('planted-secret');
    mkdirSync(dataDir, { mode: 0o700 });
    const planted = join(dataDir, 'key-encryption.key');
    writeFileSync(planted, `${Buffer.alloc(32, 7).toString('base64url')}\n`); // a secret `nobody` knows
    owned(planted, NOBODY, 0o644);
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(planted)} is owned by uid ${NOBODY}`));
  }, 120_000);

  it('refuses a symbolic link at DATA_DIR/pglite (even to a directory of ours)', async () => {
    const { base, dataDir, env } = await fresh('linked-pglite');
    mkdirSync(dataDir, { mode: 0o700 });
    const elsewhere = join(base, 'elsewhere');
    mkdirSync(elsewhere, { mode: 0o700 });
    symlinkSync(elsewhere, join(dataDir, 'pglite'));
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(join(dataDir, 'pglite'))} is a symbolic link`));
    expect(readdirSync(elsewhere)).toEqual([]);
  }, 120_000);

  it('refuses a DATA_DIR that is a symbolic link', async () => {
    const { base, dataDir, env } = await fresh('linked-data-dir');
    const real = join(base, 'real');
    mkdirSync(real, { mode: 0o700 });
    symlinkSync(real, dataDir);
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(dataDir)} is a symbolic link`));
    expect(readdirSync(real)).toEqual([]);
  }, 120_000);

  it('refuses DATA_DIR inside a directory another user owns (who could swap DATA_DIR for theirs)', async () => {
    const { base, env } = await fresh('foreign-parent');
    const parent = join(base, 'shared');
    mkdirSync(parent);
    owned(parent, NOBODY, 0o777);
    const dataDir = join(parent, 'data');
    expectRefusal(await startupError({ ...env, DATA_DIR: dataDir }), new RegExp(`^DATA_DIR: ${esc(dataDir)} is inside ${esc(parent)}, which is owned by uid ${NOBODY}`));
    expect(readdirSync(parent)).toEqual([]); // nothing was created in it
  }, 120_000);

  it('refuses an entry of another user deep inside a DATA_DIR that ran before', async () => {
    const { dataDir, env } = await fresh('deep');
    expect(await startupError(env)).toBeNull(); // creates the tree (database or generated secret)
    const inner = join(dataDir, 'inner', 'deeper');
    mkdirSync(inner, { recursive: true, mode: 0o700 });
    const planted = join(inner, 'planted');
    writeFileSync(planted, 'x');
    owned(planted, NOBODY, 0o666);
    expectRefusal(await startupError(env), new RegExp(`^DATA_DIR: ${esc(planted)} is owned by uid ${NOBODY}`));
  }, 240_000);

  it('prints the refusal as one line on stderr and exits 1 (npm start)', async () => {
    const { dataDir, env } = await fresh('printed');
    mkdirSync(dataDir, { mode: 0o700 });
    const planted = join(dataDir, 'key-encryption.key');
    writeFileSync(planted, `${Buffer.alloc(32, 7).toString('base64url')}\n`);
    owned(planted, NOBODY, 0o600);
    const r = await runMain(env);
    expect(r.outcome, `the service started with a planted secret:\n${r.out}${r.err}`).toBe(1);
    const lines = r.err.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^cannot start: DATA_DIR: ${esc(planted)} is owned by uid ${NOBODY}, not by this process's user \\(uid 0\\)`));
  }, 240_000);
});

describe(`DATA_DIR of our own (${backend})`, () => {
  // Passes before and after the fix: what is ours and loose is still tightened and accepted.
  it('tightens a loose tree of our own (DATA_DIR 0777, a directory 0777, a file 0666) and starts', async () => {
    const { dataDir, env } = await fresh('own-loose');
    mkdirSync(join(dataDir, 'notes'), { recursive: true });
    chmodSync(dataDir, 0o777);
    chmodSync(join(dataDir, 'notes'), 0o777);
    writeFileSync(join(dataDir, 'notes', 'left.txt'), 'left over');
    chmodSync(join(dataDir, 'notes', 'left.txt'), 0o666);
    expect(await startupError(env)).toBeNull();
    expect(lstatSync(dataDir).mode & 0o777).toBe(0o700);
    expect(lstatSync(join(dataDir, 'notes')).mode & 0o777).toBe(0o700);
    expect(lstatSync(join(dataDir, 'notes', 'left.txt')).mode & 0o777).toBe(0o600);
    expect(lstatSync(join(dataDir, 'key-encryption.key')).mode & 0o777).toBe(0o600);
  }, 240_000);
});

// The gate's kept bundle (GATE_BUNDLE_CACHE_FILE): with a URL pin (the default) the file carries
// the JWKS that verifies it, so whoever can write it can make the gate answer from a bundle they
// signed, with a newer iat than anything the source issued.

const SOURCE = 'http://127.0.0.1:1/v1/bundle'; // never answers: the gate has only what it kept
const EVIL = 'https://evil.example/mcp';

function bundleKey(): { key: KeyObject; kid: string; jwks: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const kid = randomBytes(8).toString('hex');
  const jwk = publicKey.export({ format: 'jwk' });
  return { key: privateKey, kid, jwks: JSON.stringify({ keys: [{ ...jwk, kid, alg: 'EdDSA', use: 'sig' }] }) };
}

function signedBundle(k: { key: KeyObject; kid: string }, iat = Math.floor(Date.now() / 1000)): string {
  const entry = {
    url: EVIL,
    name: 'evil',
    slug: 'evil',
    category: 'other',
    verdict: 'PASS',
    trust_score: 99.9,
    tier: 'gold',
    total_interactions: 1000,
    anomaly_flags: [],
    drift: { tool_manifest_drift: false, last_drift_at: null },
    tool_manifest_hash: null,
    evidence_at: null,
    score_computed_at: null,
  };
  const payload = {
    schema: 'observatory-bundle-v1',
    kind: 'bundle',
    iss: 'https://attacker.example',
    iat,
    exp: iat + 86_400,
    jti: randomBytes(8).toString('hex'),
    bundle_id: randomBytes(8).toString('hex'),
    filters: { category: null, verdict: null },
    delta: null,
    server_count: 1,
    servers: [entry],
    removed: [],
  };
  return signCompact(payload, k.key, k.kid);
}

/** A kept-bundle file as the gate writes it, for SOURCE, with its JWKS (URL pin). */
function keptFile(path: string, k: ReturnType<typeof bundleKey>): void {
  writeFileSync(path, JSON.stringify({ format: 'trust-observatory/gate-bundle-cache/v1', source: SOURCE, jws: signedBundle(k), etag: null, fetched_at: new Date().toISOString(), jwks: k.jwks }), { mode: 0o600 });
}

const down: typeof fetch = async () => {
  throw new TypeError('fetch failed');
};

function mirror(cacheFile: string, errors: string[] = [], fetchImpl: typeof fetch = down) {
  return createBundleMirror({ url: SOURCE, jwks: null, refreshSeconds: 3600, now: () => new Date(), fetch: fetchImpl, cacheFile, onError: (e) => errors.push((e as Error).message) });
}

async function mirrorStartError(m: ReturnType<typeof mirror>): Promise<Error | null> {
  try {
    await m.start();
    return null;
  } catch (err) {
    return err as Error;
  } finally {
    m.stop();
  }
}

describe('the gate cache file and its directory', () => {
  // The control: the same file, ours, is used (so a refusal below is about who owns it, not what it holds).
  it('answers from a kept file of our own (control)', async () => {
    const dir = join(root, 'gate-own');
    mkdirSync(dir, { mode: 0o700 });
    const file = join(dir, 'gate-bundle.json');
    keptFile(file, bundleKey());
    const m = mirror(file);
    expect(await mirrorStartError(m)).toBeNull();
    expect(m.usable(new Date())?.index.byUrl.get(EVIL)?.verdict).toBe('PASS');
  });
});

describe.skipIf(!isRoot)('the gate cache file and its directory, made or planted by another user', () => {
  it('refuses a kept file another user planted (signed by their own key, with their JWKS), instead of answering from it', async () => {
    const dir = join(root, 'gate-planted');
    mkdirSync(dir, { mode: 0o700 });
    const file = join(dir, 'gate-bundle.json');
    keptFile(file, bundleKey());
    owned(file, NOBODY, 0o644);
    const m = mirror(file);
    expectRefusal(await mirrorStartError(m), new RegExp(`^GATE_BUNDLE_CACHE_FILE: ${esc(file)} is owned by uid ${NOBODY}`));
    expect(m.usable(new Date())).toBeNull();
  });

  it('refuses a cache directory another user owns', async () => {
    const dir = join(root, 'gate-foreign-dir');
    mkdirSync(dir);
    owned(dir, NOBODY, 0o755);
    const m = mirror(join(dir, 'gate-bundle.json'));
    expectRefusal(await mirrorStartError(m), new RegExp(`^GATE_BUNDLE_CACHE_FILE: ${esc(dir)} is owned by uid ${NOBODY}`));
  });

  it('refuses a cache directory of ours that every user may write (0777)', async () => {
    const dir = join(root, 'gate-loose-dir');
    mkdirSync(dir);
    chmodSync(dir, 0o777);
    const m = mirror(join(dir, 'gate-bundle.json'));
    expectRefusal(await mirrorStartError(m), new RegExp(`^GATE_BUNDLE_CACHE_FILE: ${esc(dir)} may be written by every user \\(mode 777\\)`));
  });

  it('refuses a cache file that is a symbolic link (even to a good file of ours)', async () => {
    const dir = join(root, 'gate-linked-file');
    mkdirSync(dir, { mode: 0o700 });
    const real = join(dir, 'real.json');
    keptFile(real, bundleKey());
    const file = join(dir, 'gate-bundle.json');
    symlinkSync(real, file);
    const m = mirror(file);
    expectRefusal(await mirrorStartError(m), new RegExp(`^GATE_BUNDLE_CACHE_FILE: ${esc(file)} is a symbolic link`));
  });

  it('does not write the bundle into a cache directory that became another user\'s while it ran', async () => {
    const dir = join(root, 'gate-turned-foreign');
    mkdirSync(dir, { mode: 0o700 });
    const file = join(dir, 'gate-bundle.json');
    const k = bundleKey();
    const jwksUrl = 'http://127.0.0.1:1/.well-known/jwks.json';
    const serve: typeof fetch = async (input) => {
      const url = String(input);
      if (url === jwksUrl) return new Response(k.jwks, { status: 200 });
      owned(dir, NOBODY, 0o755); // between start-up's check and the write
      return new Response(signedBundle(k), { status: 200 });
    };
    const errors: string[] = [];
    const m = mirror(file, errors, serve);
    expect(await mirrorStartError(m)).toBeNull();
    expect(m.usable(new Date())).not.toBeNull(); // fetched and verified: held in memory
    expect(existsSync(file)).toBe(false);
    expect(readdirSync(dir)).toEqual([]);
    expect(errors.join('\n')).toMatch(new RegExp(`could not keep the bundle in ${esc(file)}: GATE_BUNDLE_CACHE_FILE: ${esc(dir)} is owned by uid ${NOBODY}`));
  });

  it('prints the refusal as one line on stderr and exits 1 (npm start with GATE_BUNDLE_URL)', async () => {
    const dir = join(root, 'gate-printed');
    mkdirSync(dir, { mode: 0o700 });
    const file = join(dir, 'gate-bundle.json');
    keptFile(file, bundleKey());
    owned(file, NOBODY, 0o644);
    const r = await runMain({ GATE_BUNDLE_URL: SOURCE, GATE_BUNDLE_CACHE_FILE: file });
    expect(r.outcome, `the gate started on a planted bundle:\n${r.out}${r.err}`).toBe(1);
    const lines = r.err.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^cannot start: GATE_BUNDLE_CACHE_FILE: ${esc(file)} is owned by uid ${NOBODY}`));
  }, 120_000);
});
