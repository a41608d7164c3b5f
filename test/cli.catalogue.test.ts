import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type CliIo } from '../src/cli.js';
import { loadConfig } from '../src/config.js';
import { createObservatory } from '../src/server.js';
import { json } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { installLoopbackGuard } from './support/loopback-guard.js';
import { startMcpTarget } from './support/mcp-target.js';

// The command line of issue 13: every command in --help (also through bin/observatory.js),
// `import` then a started service showing the servers UNRATED, `observe --once`, and the
// one-line refusal when a running service holds the embedded database.

const PAGE1 = join(import.meta.dirname, 'fixtures', 'mcp-registry-v0-servers.page1.json');
let dir: string;
let tdb: TestDatabase | null = null;
let dbEnv: Record<string, string>;
let restoreNetwork: () => void;

beforeAll(async () => {
  restoreNetwork = installLoopbackGuard();
  dir = await mkdtemp(join(tmpdir(), 'obs-cli-'));
  if (backend === 'postgres') {
    tdb = await createTestDatabase();
    // DATA_DIR too: the generated key-encryption secret lives there (not in the working directory).
    dbEnv = { DATABASE_URL: tdb.url!, DATA_DIR: join(dir, 'data') };
  } else dbEnv = { DATA_DIR: join(dir, 'data') };
});
afterAll(async () => {
  restoreNetwork?.();
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
});

function io(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const cli: CliIo = { out: (l) => out.push(l), err: (l) => err.push(l), env: { LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', ...dbEnv, ...env } };
  return { cli, out, err };
}

const COMMANDS = ['serve', 'demo', 'import', 'observe', 'check', 'verify', 'keys rotate', 'keys revoke'];

describe(`observatory command line (${backend})`, () => {
  it('--help lists every command, in-process and as the installed bin', async () => {
    const x = io();
    expect(await runCli(['--help'], x.cli)).toBe(0);
    const help = x.out.join('\n');
    for (const c of COMMANDS) expect(help).toMatch(new RegExp(`^  ${c}\\b`, 'm'));
    const { stdout } = await promisify(execFile)(process.execPath, ['bin/observatory.js', '--help'], { timeout: 60_000 });
    for (const c of COMMANDS) expect(stdout).toMatch(new RegExp(`^  ${c}\\b`, 'm'));
    const bad = io();
    expect(await runCli(['import', PAGE1, '--bogus'], bad.cli)).toBe(2);
    expect(bad.err[0]).toBe('unknown option --bogus\nusage: observatory import <file-or-url> [--updated-since <time>] [--json]');
    expect(await runCli(['import'], bad.cli)).toBe(2);
    // A time that does not exist is refused, not read as another one (Date reads 30 February as 1 March).
    const when = io();
    expect(await runCli(['import', PAGE1, '--updated-since', '2026-02-30T00:00:00Z'], when.cli)).toBe(2);
    expect(when.err[0]).toMatch(/--updated-since must be an RFC 3339 time/);
    expect(await runCli(['observe', 'extra'], bad.cli)).toBe(2);
    expect(await runCli(['observe', '--once=yes'], bad.cli)).toBe(2);
  });

  it('import <page.json> then a started service shows the servers UNRATED in pre-flight, stats and /atlas/report', async () => {
    const x = io();
    expect(await runCli(['import', PAGE1], x.cli)).toBe(0);
    expect(x.out[0]).toBe(`imported ${PAGE1}: 1 page, 6 entries`);
    expect(x.out).toContain('  local-only servers (packages, no remote): 1 counted, not tracked');
    expect(x.out.join('\n')).toMatch(/remote servers: 3 added, 0 already tracked/);
    expect(x.out).toContain('    - io.github.odd/websocket remote 0: transport "websocket" is not streamable-http or sse');
    expect(x.out).toContain('  + io.github.acme/weather  streamable-http  https://weather.acme.example/mcp  [weather]');

    const again = io();
    expect(await runCli(['import', PAGE1, '--json'], again.cli)).toBe(0);
    expect(JSON.parse(again.out.join('\n'))).toMatchObject({ added: 0, updated: 3, localOnly: 1 });

    // "npm start" on the same database.
    const obs = await createObservatory(loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', ...dbEnv }), { logger: false });
    try {
      const base = `http://127.0.0.1:${new URL(await obs.listen()).port}`;
      const pf = await json(fetch(`${base}/v1/preflight?target=${encodeURIComponent('io.github.acme/weather')}`));
      expect(pf).toMatchObject({ verdict: 'UNRATED', tracked: true, server_url: 'https://weather.acme.example/mcp' });
      const stats = await json(fetch(`${base}/api/stats`));
      expect(stats).toMatchObject({ total_servers_tracked: 3, total_servers_unrated: 3, total_servers_rated: 0 });
      expect(stats.categories).toContainEqual(expect.objectContaining({ name: 'weather', servers: 2, rated: 0, unrated: 2 }));
      const page = await (await fetch(`${base}/atlas/report`)).text();
      expect(page).toMatch(/<tr data-category="weather">[\s\S]*?data-col="unrated">2</);
    } finally {
      await obs.close();
    }
  });

  it('observe --once probes the tracked servers and prints a summary', async () => {
    const target = await startMcpTarget([{ name: 'get_forecast', inputSchema: { type: 'object' } }]);
    try {
      const page = join(dir, 'local.json');
      await writeFile(page, JSON.stringify({ servers: [{ server: { name: 'io.github.local/forecast', remotes: [{ type: 'streamable-http', url: target.url }] } }], metadata: { count: 1 } }));
      expect(await runCli(['import', page], io().cli)).toBe(0);
      // Nothing here is slow on purpose: a timeout far above a healthy probe keeps a loaded machine from
      // turning the ok probe into a timeout.
      const x = io({ ALLOW_PRIVATE_TARGETS: '1', OBSERVE_TIMEOUT_MS: '30000' });
      expect(await runCli(['observe', '--once'], x.cli)).toBe(0);
      // The three catalogued example.* hosts do not resolve (the test's network guard): not scored.
      expect(x.out[0]).toMatch(/^observed 4 servers: 1 ok, 0 failed, 0 timed out, 0 need auth, 3 unresolved, 0 refused; 0 manifest drift$/);
      expect(x.out.some((l) => /^ {2}ok +io\.github\.local\/forecast .* 1 tools$/.test(l))).toBe(true);
      expect(target.initializations).toBe(1);
      // Right after, nothing is due.
      const y = io({ ALLOW_PRIVATE_TARGETS: '1' });
      expect(await runCli(['observe', '--once'], y.cli)).toBe(0);
      expect(y.out[0]).toMatch(/^observed 0 servers/);
      // Unresolved names stay UNRATED; the observed local server is rated.
      const obs = await createObservatory(loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', ...dbEnv }), { logger: false });
      try {
        const base = `http://127.0.0.1:${new URL(await obs.listen()).port}`;
        expect((await json(fetch(`${base}/v1/preflight?target=${encodeURIComponent('io.github.acme/weather')}`))).verdict).toBe('UNRATED');
        expect((await json(fetch(`${base}/v1/preflight?target=${encodeURIComponent('io.github.local/forecast')}`))).verdict).toBe('UNCERTAIN');
      } finally {
        await obs.close();
      }
    } finally {
      await target.close();
    }
  });

  it.skipIf(backend !== 'pglite')('a command that needs the embedded database a running service holds says so in one line', async () => {
    // A live process holding the data directory's pid lock, as a running `npm start` does. It
    // lives until this test kills it, so a command that waited for the lock would never return
    // (the test times out) while one that refuses returns 4: no clock needed to tell them apart.
    const holder: ChildProcess = spawn(process.execPath, ['-e', 'setInterval(() => {}, 3_600_000)'], { stdio: 'ignore' });
    try {
      await writeFile(join(dbEnv.DATA_DIR!, 'observatory.lock'), String(holder.pid));
      for (const argv of [['import', PAGE1], ['observe', '--once'], ['demo'], ['keys', 'rotate'], ['keys', 'revoke', 'some-kid']]) {
        const x = io();
        expect(await runCli(argv, x.cli)).toBe(4);
        expect(x.err).toHaveLength(1);
        expect(x.err[0]).toMatch(new RegExp(`^cannot run ${argv[0]}( rotate| revoke)?: the embedded database in .* is in use by process ${holder.pid}; stop it first, or set DATABASE_URL`));
        expect(x.out).toEqual([]);
      }
    } finally {
      holder.kill();
      await new Promise((r) => holder.once('exit', r));
    }
    // The holder is gone: its stale lock is taken over and the data is intact.
    const x = io();
    expect(await runCli(['import', PAGE1, '--json'], x.cli)).toBe(0);
    expect(JSON.parse(x.out.join('\n'))).toMatchObject({ added: 0, updated: 3 });
  });
});

if (backend !== 'pglite') console.log('SKIP locked-database CLI test: the pid lock only exists for the embedded database (PGlite); PostgreSQL is shared by design');
