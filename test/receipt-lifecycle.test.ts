import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { createPublicKey, verify as edVerify } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createObservatory, type Observatory } from '../src/server.js';
import { EXIT, runCli, type CliIo } from '../src/cli.js';
import { json, postJson } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

// Receipts outlive keys and processes: issue, stop, rotate with the CLI, restart, verify again.

let dir: string;
let tdb: TestDatabase | null = null;
let dbEnv: Record<string, string>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'obs-receipts-'));
  if (backend === 'postgres') {
    tdb = await createTestDatabase({ migrate: false });
    await tdb.db.close(); // each start below opens (and migrates) it through the configuration
    // DATA_DIR too: the generated key-encryption secret lives there (not in the working directory).
    dbEnv = { DATABASE_URL: tdb.url!, DATA_DIR: join(dir, 'data') };
  } else {
    dbEnv = { DATA_DIR: join(dir, 'data') };
  }
}, 120_000);
afterAll(async () => {
  if (tdb) {
    const pg = (await import('pg')).default;
    const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${new URL(tdb.url!).pathname.slice(1)} WITH (FORCE)`);
    await admin.end();
  }
  await rm(dir, { recursive: true, force: true });
});

async function start(): Promise<{ obs: Observatory; base: string }> {
  const obs = await createObservatory(loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', ...dbEnv }), { logger: false });
  const address = await obs.listen();
  return { obs, base: `http://127.0.0.1:${new URL(address).port}` };
}

function io(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const cli: CliIo = { out: (l) => out.push(l), err: (l) => err.push(l), env: { LOG_LEVEL: 'silent', ...dbEnv, ...env } };
  return { cli, out, err };
}

function nodeCryptoVerify(jws: string, jwks: { keys: Record<string, string>[] }): boolean {
  const [h, p, s] = jws.split('.') as [string, string, string];
  const { kid } = JSON.parse(Buffer.from(h, 'base64url').toString());
  const jwk = jwks.keys.find((k) => k.kid === kid);
  if (!jwk) return false;
  return edVerify(null, Buffer.from(`${h}.${p}`), createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' }), Buffer.from(s, 'base64url'));
}

const kidOf = (jws: string) => JSON.parse(Buffer.from(jws.split('.')[0]!, 'base64url').toString()).kid as string;

describe(`receipts across rotation and restart (${backend})`, () => {
  it('a pre-flight receipt still verifies after `keys rotate` and a restart; the CLI verifies it offline', async () => {
    // 1. First run: a tracked server, a pre-flight, its receipt.
    const a = await start();
    await postJson(`${a.base}/api/report`, { server_url: 'https://rot.example.com/mcp', success: true, latency_ms: 50 });
    const first = await json(fetch(`${a.base}/v1/preflight?target=https://rot.example.com/mcp`));
    const jwks1 = await json(fetch(`${a.base}/.well-known/jwks.json`));
    expect(jwks1.keys).toHaveLength(1);
    const oldKid = kidOf(first.diligence_receipt);
    await a.obs.close();

    // 2. Rotate with the CLI against the same database while the service is down.
    const r = io();
    expect(await runCli(['keys', 'rotate'], r.cli)).toBe(EXIT.ok);
    const newKid = /new active signing key: (\S+)/.exec(r.out.join('\n'))?.[1];
    expect(newKid).toBeTruthy();
    expect(newKid).not.toBe(oldKid);

    // 3. Restart: the new key signs, the old one stays published, the old receipt verifies everywhere.
    const b = await start();
    try {
      const jwks2 = await json(fetch(`${b.base}/.well-known/jwks.json`));
      expect(jwks2.keys.map((k: { kid: string }) => k.kid)).toEqual([newKid, oldKid]);
      const v = await fetch(`${b.base}/v1/verify?jws=${first.diligence_receipt}`);
      expect(v.status).toBe(200);
      expect((await json(v)).payload).toMatchObject({ jti: first.receipt_id, verdict: first.verdict });
      const stored = await json(fetch(`${b.base}/v1/receipt/${first.receipt_id}`));
      expect(stored.verification).toMatchObject({ valid: true, kid: oldKid });
      expect(nodeCryptoVerify(first.diligence_receipt, jwks2)).toBe(true);
      const second = await json(fetch(`${b.base}/v1/preflight?target=rot.example.com/mcp`));
      expect(kidOf(second.diligence_receipt)).toBe(newKid);
      expect(nodeCryptoVerify(second.diligence_receipt, jwks2)).toBe(true);
      expect(nodeCryptoVerify(second.diligence_receipt, jwks1)).toBe(false);

      // 4. The CLI: offline against a JWKS file, and against the JWKS URL.
      const file = join(dir, 'jwks.json');
      await writeFile(file, JSON.stringify(jwks2));
      for (const jws of [first.diligence_receipt, second.diligence_receipt]) {
        const ok = io();
        expect(await runCli(['verify', jws, '--jwks', file], ok.cli)).toBe(EXIT.ok);
        expect(JSON.parse(ok.out.join('\n'))).toMatchObject({ valid: true, payload: { jti: jws === first.diligence_receipt ? first.receipt_id : second.receipt_id } });
      }
      const byUrl = io();
      expect(await runCli(['verify', `--jwks=${b.base}/.well-known/jwks.json`, second.diligence_receipt], byUrl.cli)).toBe(EXIT.ok);
      const byDefault = io({ PUBLIC_BASE_URL: b.base });
      expect(await runCli(['verify', second.diligence_receipt], byDefault.cli)).toBe(EXIT.ok);

      const [h, p, s] = first.diligence_receipt.split('.');
      const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p, 'base64url').toString()), verdict: 'PASS', trust_score: 100 })).toString('base64url');
      const bad = io();
      expect(await runCli(['verify', `${h}.${forged}.${s}`, '--jwks', file], bad.cli)).toBe(EXIT.invalid);
      expect(bad.err.join('\n')).toMatch(/invalid: signature does not verify/);
      const oldOnly = join(dir, 'jwks-old.json');
      await writeFile(oldOnly, JSON.stringify(jwks1));
      expect(await runCli(['verify', second.diligence_receipt, '--jwks', oldOnly], io().cli)).toBe(EXIT.invalid);
    } finally {
      await b.obs.close();
    }
  }, 240_000);

  it('CLI usage errors exit 2 and --help lists every command', async () => {
    const h = io();
    expect(await runCli(['--help'], h.cli)).toBe(EXIT.ok);
    for (const c of ['serve', 'verify', 'keys rotate']) expect(h.out.join('\n')).toContain(c);
    expect(await runCli([], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['frobnicate'], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['verify'], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['verify', 'a', 'b'], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['verify', 'a.b.c', '--jwks'], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['verify', 'a.b.c', '--nope', 'x'], io().cli)).toBe(EXIT.usage);
    const missing = io();
    expect(await runCli(['verify', 'a.b.c', '--jwks', join(dir, 'no-such.json')], missing.cli)).toBe(EXIT.usage);
    expect(missing.err.join('\n')).toMatch(/cannot read the JWKS file/);
    const notJwks = join(dir, 'not-jwks.json');
    await writeFile(notJwks, '{"hello":1}');
    expect(await runCli(['verify', 'a.b.c', '--jwks', notJwks], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['keys', 'rotate', 'extra'], io().cli)).toBe(EXIT.usage);
    expect(await runCli(['keys', 'rotate'], io({ SIGNING_KEY_JWK: '{"kty":"OKP","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}' }).cli)).toBe(EXIT.usage);
    expect(await runCli(['verify', 'a.b.c'], io({ PUBLIC_BASE_URL: 'ftp://nope' }).cli)).toBe(EXIT.usage);
  });

  it('the installed bin runs the CLI through tsx with the documented exit codes', async () => {
    const run = promisify(execFile);
    const bin = join(import.meta.dirname, '..', 'bin', 'observatory.js');
    const help = await run(process.execPath, [bin, '--help']);
    expect(help.stdout).toMatch(/keys rotate/);
    const jwks = join(dir, 'vector-jwks.json');
    await writeFile(jwks, JSON.stringify({ keys: [] }));
    const err = await run(process.execPath, [bin, 'verify', 'a.b.c', '--jwks', jwks]).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(EXIT.invalid);
    expect((err as { stderr: string }).stderr).toMatch(/invalid/);
  }, 60_000);
});
