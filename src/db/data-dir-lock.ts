// The embedded database's lock on DATA_DIR. PGlite is a single-process database: two processes
// on one data directory corrupt it (measured: two containers on one volume, both "ready", each
// acknowledging reports the other then lost). A process id alone cannot say who holds the lock:
// in containers every service is PID 1 of its own namespace, so "the holder is my own pid" meant
// "stale" and the second container took over a live lock; and a dead holder's pid may be reused.
//
// The lock file names its holder completely, and is written whole before it exists under its
// name (a temporary file linked into place, so it is never seen empty):
//   {"token", "pid", "ns" (the pid namespace), "start" (the process's start time), "boot"}.
// A holder in this pid namespace on this boot is judged by its process: alive when that pid runs
// and started when the lock says. A holder this process cannot see (another container or host,
// or a file from an older version naming a pid of ours) is judged by its heartbeat: the holder
// touches the file every HEARTBEAT_MS, and it is stale after STALE_MS without one; start-up
// waits that long for it rather than failing a container that restarts while its predecessor's
// lock is still fresh. A stale lock is taken over atomically: renamed aside (only one of two
// processes racing can), checked to be the file judged stale, then replaced.
import { randomUUID } from 'node:crypto';
import { linkSync, lstatSync, readFileSync, readlinkSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { readOwnFile } from './data-dir.js';

export class DataDirBusyError extends Error {}

export const LOCK_FILE = 'observatory.lock';
/** How often the holder touches its lock file. */
export const HEARTBEAT_MS = 2_000;
/** A lock whose holder cannot be seen is stale after this long without a heartbeat. */
export const STALE_MS = 30_000;

interface Holder {
  token: string;
  pid: number;
  ns: string | null;
  start: string | null;
  boot: string | null;
}

function readOr<T>(read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    return fallback;
  }
}

const pidNamespace = (pid: number | 'self') => readOr(() => readlinkSync(`/proc/${pid}/ns/pid`), null);
const bootId = () => readOr(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(), null);
/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); the name in field 2 may hold spaces. */
const startTime = (pid: number | 'self') =>
  readOr(() => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  }, null);

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function parse(text: string): Partial<Holder> | null {
  const t = text.trim();
  if (/^\d+$/.test(t)) return { pid: Number(t) }; // an older version's lock: a pid alone
  try {
    const v = JSON.parse(t) as Partial<Holder>;
    return v !== null && typeof v === 'object' && typeof v.pid === 'number' ? v : null;
  } catch {
    return null;
  }
}

const SELF = 'this process';

type Judgement = { live: false } | { live: true; byHeartbeat: boolean; detail: string };

/** Whether the lock file's holder still holds it, as far as this process can tell. */
function judge(held: Partial<Holder> | null, ageMs: number, me: Holder, staleMs: number): Judgement {
  const heartbeat = (): Judgement =>
    ageMs < staleMs ? { live: true, byHeartbeat: true, detail: `its last heartbeat was ${Math.round(ageMs / 1000)} s ago` } : { live: false };
  if (held === null || held.pid === undefined) return heartbeat(); // unreadable: judged by age alone
  const running = (pid: number): Judgement => ({ live: true, byHeartbeat: false, detail: `process ${pid} is running` });
  const visible = typeof held.ns === 'string' && held.ns === me.ns && held.boot === me.boot;
  if (visible) {
    if (held.pid === me.pid && held.start === me.start) return { live: true, byHeartbeat: false, detail: SELF };
    if (!pidAlive(held.pid)) return { live: false };
    const start = held.start ?? null;
    return start === null || startTime(held.pid) === start ? running(held.pid) : { live: false };
  }
  // A pid of another namespace or host, or an older version's bare pid: a bare pid other than
  // ours that runs here holds it; anything else is judged by its heartbeat.
  if (held.ns === undefined && held.pid !== me.pid && pidAlive(held.pid)) return running(held.pid);
  return heartbeat();
}

function describe(held: Partial<Holder> | null): string {
  return held?.pid !== undefined ? `process ${held.pid}` : 'another process';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Takes DATA_DIR's lock, waiting up to STALE_MS for a holder this process cannot see, and returns
 * its release. Throws DataDirBusyError when a live process holds it.
 */
export async function lockDataDir(dir: string, opts: { staleMs?: number; heartbeatMs?: number } = {}): Promise<() => void> {
  const staleMs = opts.staleMs ?? STALE_MS;
  const heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_MS;
  const lock = join(dir, LOCK_FILE);
  const me: Holder = { token: randomUUID(), pid: process.pid, ns: pidNamespace('self'), start: startTime('self'), boot: bootId() };
  const body = JSON.stringify(me);
  const deadline = Date.now() + staleMs + heartbeatMs;
  for (;;) {
    // Written whole under a private name, then linked into place: the lock is never seen empty,
    // and link() fails when a lock exists (no clobbering).
    const temp = join(dir, `${LOCK_FILE}.${me.token}`);
    writeFileSync(temp, body, { flag: 'wx', mode: 0o600 });
    try {
      linkSync(temp, lock);
      rmSync(temp, { force: true });
      return holdLock(lock, me.token, heartbeatMs);
    } catch (err) {
      rmSync(temp, { force: true });
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    // Read as every file of DATA_DIR is (src/db/data-dir.ts): never through a symbolic link, and
    // refused when another user owns it.
    const text = readOwnFile('DATA_DIR', lock, 'tighten');
    if (text === null) continue; // released meanwhile
    let ageMs: number;
    try {
      ageMs = Date.now() - lstatSync(lock).mtimeMs;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    const held = parse(text);
    const verdict = judge(held, ageMs, me, staleMs);
    if (verdict.live) {
      if (!verdict.byHeartbeat || Date.now() >= deadline) {
        const who = verdict.byHeartbeat ? `${describe(held)} of another container or host (${verdict.detail})` : verdict.detail === SELF ? 'this process already' : describe(held);
        throw new DataDirBusyError(`the embedded database in ${resolve(dir)} is in use by ${who}; stop it first, or set DATABASE_URL to share a PostgreSQL server`);
      }
      await sleep(Math.min(heartbeatMs, Math.max(50, deadline - Date.now())));
      continue;
    }
    // Stale: moved aside (of two processes racing, one rename succeeds), and replaced only when
    // what was moved is the file judged stale; a fresh lock moved by mistake is linked back.
    const aside = join(dir, `${LOCK_FILE}.stale.${me.token}`);
    try {
      renameSync(lock, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    if (readOr(() => readFileSync(aside, 'utf8'), null) !== text) {
      try {
        linkSync(aside, lock);
      } catch {
        // a third process locked meanwhile: its lock stands, the moved one is dropped
      }
    }
    rmSync(aside, { force: true });
  }
}

/** Keeps the lock's heartbeat while held; the release stops it and removes the lock if still ours. */
function holdLock(lock: string, token: string, heartbeatMs: number): () => void {
  const beat = setInterval(() => {
    try {
      const now = new Date();
      utimesSync(lock, now, now);
    } catch {
      // removed behind our back: nothing to refresh
    }
  }, heartbeatMs);
  beat.unref();
  return () => {
    clearInterval(beat);
    const held = readOr(() => parse(readFileSync(lock, 'utf8')), null);
    if (held?.token === token) rmSync(lock, { force: true });
  };
}
