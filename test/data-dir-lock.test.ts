import { afterEach, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DataDirBusyError, LOCK_FILE, lockDataDir } from '../src/db/data-dir-lock.js';

// The embedded database's lock on DATA_DIR (src/db/data-dir-lock.ts). Two processes on one data
// directory corrupt PGlite; the lock must tell a live holder from a dead one without trusting a
// bare process id: in containers every service is PID 1 of its own namespace.

const ROOT = new URL('..', import.meta.url).pathname;
const HOLDER = join(ROOT, 'test/support/data-dir-holder.ts');
const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), 'obs-lock-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const myNs = (() => {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return null;
  }
})();
const onLinux = myNs !== null;
const writeLock = (dir: string, holder: unknown, ageMs = 0) => {
  const f = join(dir, LOCK_FILE);
  writeFileSync(f, typeof holder === 'string' ? holder : JSON.stringify(holder));
  const t = new Date(Date.now() - ageMs);
  utimesSync(f, t, t);
};
/** Touches the lock file as a live holder's heartbeat would, until stopped. */
const beating = (dir: string) => {
  const t = setInterval(() => utimesSync(join(dir, LOCK_FILE), new Date(), new Date()), 50);
  return () => clearInterval(t);
};
const held = (dir: string) => JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8')) as { token: string; pid: number };

describe('the data directory lock', () => {
  it('takes a free directory, refreshes its heartbeat, and its release removes only its own lock', async () => {
    const dir = fresh();
    const release = await lockDataDir(dir, { heartbeatMs: 50 });
    expect(held(dir).pid).toBe(process.pid);
    const before = statSync(join(dir, LOCK_FILE)).mtimeMs;
    utimesSync(join(dir, LOCK_FILE), new Date(before - 60_000), new Date(before - 60_000));
    await new Promise((r) => setTimeout(r, 300));
    expect(statSync(join(dir, LOCK_FILE)).mtimeMs).toBeGreaterThan(before - 60_000);
    release();
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false);
    // A release after someone else's lock replaced ours leaves theirs.
    const again = await lockDataDir(dir);
    writeLock(dir, { token: 'theirs', pid: 1, ns: 'pid:[1]', start: '1', boot: 'x' });
    again();
    expect(held(dir).token).toBe('theirs');
  });

  it('refuses a second open in the same process, and a live process of this namespace', async () => {
    const dir = fresh();
    const release = await lockDataDir(dir);
    await expect(lockDataDir(dir)).rejects.toThrow(/in use by this process already/);
    release();
    // An older version's lock: a bare pid of a live process here.
    writeLock(dir, String(process.ppid));
    await expect(lockDataDir(dir)).rejects.toThrow(new RegExp(`in use by process ${process.ppid}; stop it first`));
  });

  it.skipIf(!onLinux)('a holder of another pid namespace (a container) is judged by its heartbeat: fresh is busy after waiting, stale is taken over', async () => {
    const dir = fresh();
    // It is PID 1 there, like us in ours, and even names our own pid: never "ourselves".
    const other = { token: 'c1', pid: process.pid, ns: 'pid:[4026500001]', start: '12345', boot: 'another-boot' };
    writeLock(dir, other);
    const stop = beating(dir);
    const started = Date.now();
    const err = await lockDataDir(dir, { staleMs: 600, heartbeatMs: 100 }).catch((e: unknown) => e);
    stop();
    expect(err).toBeInstanceOf(DataDirBusyError);
    expect((err as Error).message).toMatch(/in use by process \d+ of another container or host \(its last heartbeat was \d+ s ago\)/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600); // it waited for the heartbeat to lapse
    expect(held(dir).token).toBe('c1');
    writeLock(dir, other, 5_000);
    const release = await lockDataDir(dir, { staleMs: 600, heartbeatMs: 100 });
    expect(held(dir).pid).toBe(process.pid);
    release();
  });

  it.skipIf(!onLinux)('a dead holder, or a reused pid (another start time), is taken over at once; an empty lock file by its age', async () => {
    const dir = fresh();
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    writeLock(dir, { token: 'reused', pid: process.ppid, ns: myNs, start: '1', boot });
    (await lockDataDir(dir))();
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    writeLock(dir, { token: 'dead', pid: Number(dead.stdout), ns: myNs, start: '1', boot });
    (await lockDataDir(dir))();
    writeLock(dir, '');
    const stop = beating(dir);
    await expect(lockDataDir(dir, { staleMs: 300, heartbeatMs: 50 })).rejects.toThrow(/another process of another container or host/);
    stop();
    writeLock(dir, '', 5_000);
    (await lockDataDir(dir, { staleMs: 300, heartbeatMs: 50 }))();
  });

  it('of many processes taking over one stale lock at once, exactly one holds it', async () => {
    const dir = fresh();
    writeLock(dir, { token: 'gone', pid: 1, ns: 'pid:[4026500002]', start: '1', boot: 'gone' }, 60_000);
    const run = () =>
      new Promise<string>((done) => {
        const p = spawn(process.execPath, ['--import', 'tsx', HOLDER, dir, '3000', 'lock', '30000'], { cwd: ROOT });
        let out = '';
        p.stdout.on('data', (c: Buffer) => (out += c.toString()));
        p.on('exit', () => done(out.trim()));
      });
    const outcomes = await Promise.all(Array.from({ length: 8 }, run));
    expect(outcomes.filter((o) => o === 'open')).toHaveLength(1);
    expect(outcomes.filter((o) => o.startsWith('busy: '))).toHaveLength(7);
  }, 120_000);
});

// Two containers on one volume: each service is PID 1 of its own pid namespace. Run for real with
// unshare(1) when this machine allows it (root, util-linux).
const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;
if (!canUnshare) console.log('data-dir-lock: skipping the two-containers test (needs root and unshare --pid)');

describe.skipIf(!canUnshare)('two services as PID 1 of their own namespaces on one data directory', () => {
  it('the second is refused (it waits for the first one\'s heartbeat to lapse, which never happens)', async () => {
    const dir = fresh();
    const start = (holdMs: number, ...mode: string[]) => {
      const p = spawn('unshare', ['--pid', '--fork', '--kill-child', '--mount-proc', process.execPath, '--import', 'tsx', HOLDER, dir, String(holdMs), ...mode], { cwd: ROOT, detached: true });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString()));
      const exited = new Promise<string>((done) => p.on('exit', () => done(out.trim())));
      return { p, exited, opened: () => out.includes('open') };
    };
    const first = start(60_000);
    for (let i = 0; i < 600 && !first.opened(); i++) await new Promise((r) => setTimeout(r, 100));
    expect(first.opened()).toBe(true);
    expect(held(dir).pid).toBe(1);
    // The second takes the same lock the embedded database takes, with a 6 s heartbeat window
    // instead of 30 s (the test's time): it cannot see the first, so it waits for its heartbeat.
    const second = await start(0, 'lock', '6000').exited;
    process.kill(-first.p.pid!, 'SIGKILL');
    await first.exited;
    expect(second).toMatch(/^busy: the embedded database in .* is in use by process 1 of another container or host/);
  }, 150_000);
});
