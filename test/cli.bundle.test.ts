import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../src/cli.js';
import { json, startTestApp, type TestApp } from './support/app.js';
import { seedVerdicts } from './support/seed.js';
import { backend } from './support/db.js';

// A CI job with no network: `observatory bundle pull` while the service runs, then the service is
// stopped (and fetch made to throw) and `observatory check --bundle` gates from the file alone.

const PASS = 'https://pass.cli-bundle.example.com/mcp';
const FAIL = 'https://fail.cli-bundle.example.com/mcp';
const UNCERTAIN = 'https://uncertain.cli-bundle.example.com/mcp';
const ROOT = new URL('..', import.meta.url).pathname;

let t: TestApp;
let up = true;
const dir = mkdtempSync(join(tmpdir(), 'cli-bundle-'));
const file = join(dir, 'bundle.json');
let pinned: string;

function io(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l), env } };
}

/** Runs `fn` with every fetch failing: proof that nothing is asked of the network. */
async function offline<T>(fn: () => Promise<T>): Promise<T> {
  const spy = vi.spyOn(globalThis, 'fetch').mockImplementation(async () => {
    throw new Error('network used in an offline check');
  });
  try {
    return await fn();
  } finally {
    spy.mockRestore();
  }
}

const b64json = (part: string) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));

beforeAll(async () => {
  t = await startTestApp({});
  await seedVerdicts(t.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
  pinned = join(dir, 'pinned-jwks.json');
  writeFileSync(pinned, JSON.stringify(await json(fetch(`${t.base}/.well-known/jwks.json`))));
}, 120_000);
afterAll(async () => {
  if (up) await t?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe(`observatory bundle pull / check --bundle / verify (${backend})`, () => {
  it('pulls and verifies the bundle, writing it with the JWKS that verified it', async () => {
    const x = io();
    expect(await runCli(['bundle', 'pull', '--out', file, '--observatory', t.base], x.io)).toBe(0);
    expect(x.out).toHaveLength(1);
    expect(x.out[0]).toMatch(/^bundle [0-9a-f]{16}: 3 servers, issued .* signed by key .*; written to /);
    const f = JSON.parse(readFileSync(file, 'utf8'));
    expect(f.format).toBe('observatory-bundle-v1');
    expect(f.jwks).toEqual(JSON.parse(readFileSync(pinned, 'utf8')));
    // To stdout when no --out, the summary on stderr; filters are passed on.
    const s = io({ OBSERVATORY_URL: t.base });
    expect(await runCli(['bundle', 'pull', '--verdict', 'FAIL', '--jwks', pinned], s.io)).toBe(0);
    const fails = b64json(JSON.parse(s.out.join('\n')).jws.split('.')[1]);
    expect(fails.servers.map((e: { url: string }) => e.url)).toEqual([FAIL]);
    expect(s.err[0]).toMatch(/^bundle [0-9a-f]{16}: 1 servers/);
    // A pull verified against a key that did not sign it is refused and writes nothing.
    const other = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    writeFileSync(join(dir, 'foreign.json'), JSON.stringify({ keys: [{ ...other, kid: 'foreign' }] }));
    const r = io();
    expect(await runCli(['bundle', 'pull', '--observatory', t.base, '--jwks', join(dir, 'foreign.json'), '--out', join(dir, 'never.json')], r.io)).toBe(1);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toMatch(/^bundle pull: refused: unknown key id/);
    const bad = io();
    expect(await runCli(['bundle', 'pull', '--observatory', t.base, '--verdict', 'MAYBE'], bad.io)).toBe(1);
    expect(bad.err[0]).toMatch(/answered 400: verdict must be/);
    expect(await runCli(['bundle', 'pull', '--observatory', 'http://127.0.0.1:1'], io().io)).toBe(1);
  });

  it('gates offline with the service stopped: 0 PASS, 1 FAIL, 2 UNCERTAIN or unknown', async () => {
    await t.close();
    up = false;
    await offline(async () => {
      for (const [server, code, first] of [
        [PASS, 0, /^PASS https:\/\/pass\.cli-bundle\.example\.com\/mcp \(trust \d+\.\d, 20 reports/],
        [FAIL, 1, /^FAIL https:\/\/fail/],
        [UNCERTAIN, 2, /^(UNCERTAIN|PASS|FAIL) https:\/\/uncertain/],
        ['https://unknown.example.com/mcp', 2, /^UNRATED https:\/\/unknown\.example\.com\/mcp \(not in the bundle/],
        ['pass-cli-bundle-example-com-mcp', 0, /^PASS /],
        [`${PASS}?session=1`, 0, /^PASS /],
      ] as const) {
        const x = io();
        const got = await runCli(['check', server, '--bundle', file], x.io);
        // UNCERTAIN's verdict depends on one report; its code follows its verdict.
        const expected = server === UNCERTAIN ? { PASS: 0, FAIL: 1, UNCERTAIN: 2 }[x.out[0]!.split(' ')[0] as 'PASS'] : code;
        expect(got, `${server}: ${x.err.join('\n')}`).toBe(expected);
        expect(x.out[0]).toMatch(first);
        expect(x.out[1]).toMatch(/^from bundle [0-9a-f]{16} of .* keys from the JWKS inside the bundle file$/);
      }
      const j = io();
      expect(await runCli(['check', FAIL, '--bundle', file, '--jwks', pinned, '--json'], j.io)).toBe(1);
      expect(JSON.parse(j.out.join('\n'))).toMatchObject({ verdict: 'FAIL', tracked: true, ci: { exit_code: 1 }, bundle: { keys_from: pinned } });
    });
  });

  it('refuses an expired, tampered or foreign-signed bundle with exit 3 and one clear line', async () => {
    const f = JSON.parse(readFileSync(file, 'utf8'));
    const [h, p, s] = f.jws.split('.') as [string, string, string];
    const payload = b64json(p);
    const refused = async (args: string[], pattern: RegExp) => {
      const x = io();
      expect(await offline(() => runCli(args, x.io))).toBe(3);
      expect(x.err).toHaveLength(1);
      expect(x.err[0]).toMatch(pattern);
      expect(x.out).toHaveLength(0);
    };

    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime((payload.exp + 1) * 1000);
      await refused(['check', PASS, '--bundle', file], /^observatory check: bundle refused: bundle expired at \S+ \(issued \S+\)$/);
    } finally {
      vi.useRealTimers();
    }

    const forged = { ...payload, servers: payload.servers.map((e: { url: string }) => (e.url === FAIL ? { ...e, verdict: 'PASS', trust_score: 99 } : e)) };
    const tamperedFile = join(dir, 'tampered.json');
    writeFileSync(tamperedFile, JSON.stringify({ ...f, jws: `${h}.${Buffer.from(JSON.stringify(forged)).toString('base64url')}.${s}` }));
    await refused(['check', FAIL, '--bundle', tamperedFile], /^observatory check: bundle refused: signature does not verify$/);

    // The file's own JWKS swapped for another key under the same kid: the signature fails; a
    // pinned JWKS that does not hold the signing key refuses it too.
    const other = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    const swapped = join(dir, 'swapped.json');
    writeFileSync(swapped, JSON.stringify({ ...f, jwks: { keys: [{ ...other, kid: b64json(h).kid }] } }));
    await refused(['check', PASS, '--bundle', swapped], /^observatory check: bundle refused: signature does not verify$/);
    await refused(['check', PASS, '--bundle', file, '--jwks', join(dir, 'foreign.json')], /^observatory check: bundle refused: unknown key id /);
    await refused(['check', PASS, '--bundle', join(dir, 'missing.json')], /^observatory check: bundle refused: cannot read .*ENOENT$/);
    writeFileSync(join(dir, 'garbage.json'), '{"format": "something else"}');
    await refused(['check', PASS, '--bundle', join(dir, 'garbage.json')], /^observatory check: bundle refused: .* not an observatory bundle file/);
  });

  it('verify accepts a bundle file (against its JWKS or a pinned one) and refuses a tampered one', async () => {
    const x = io();
    expect(await offline(() => runCli(['verify', file, '--jwks', pinned], x.io))).toBe(0);
    expect(JSON.parse(x.out.join('\n'))).toMatchObject({ valid: true, kind: 'bundle', server_count: 3, keys_from: pinned, delta: null });
    const own = io();
    expect(await offline(() => runCli(['verify', file], own.io))).toBe(0);
    expect(own.err[0]).toMatch(/^note: verified against the JWKS inside the file/);
    const bad = io();
    expect(await offline(() => runCli(['verify', join(dir, 'tampered.json')], bad.io))).toBe(1);
    expect(bad.err).toEqual(['invalid: signature does not verify']);
    // The bare JWS on stdin, with a pinned JWKS.
    const jws = JSON.parse(readFileSync(file, 'utf8')).jws as string;
    const stdin = io();
    expect(await offline(() => runCli(['verify', '-', '--jwks', pinned], { ...stdin.io, stdin: async () => jws }))).toBe(0);
    expect(JSON.parse(stdin.out.join('\n')).kind).toBe('bundle');
  });

  it('the installed command gates from the file in a process of its own', () => {
    const run = (server: string) =>
      spawnSync(process.execPath, [join(ROOT, 'bin/observatory.js'), 'check', server, '--bundle', file, '--jwks', pinned], {
        encoding: 'utf8',
        timeout: 120_000,
        // No observatory to reach even if it tried.
        env: { ...process.env, OBSERVATORY_URL: 'http://127.0.0.1:1', PUBLIC_BASE_URL: 'http://127.0.0.1:1' },
      });
    const pass = run(PASS);
    expect(pass.status, pass.stderr).toBe(0);
    expect(pass.stdout).toMatch(/^PASS /);
    const fail = run(FAIL);
    expect(fail.status, fail.stderr).toBe(1);
  }, 240_000);
});
