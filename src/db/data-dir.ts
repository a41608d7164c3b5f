import { chmodSync, closeSync, constants, fchmodSync, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, type Stats } from 'node:fs';
import { dirname, join, parse, resolve, sep } from 'node:path';

// DATA_DIR holds the embedded database and the generated key-encryption secret: nobody but the
// service's own user may read or write anything in it (issue 17 finding 3). PGlite creates its
// files world-writable (0666, whatever the umask) inside directories that follow the umask
// (0755 by default); the directory itself at 0700 is what keeps other users out of files PGlite
// creates while it runs, and `tightenTree` brings every file we own to 0600 at start and stop.
//
// Tightening only helps with what this user owns (ops audit finding 1): a DATA_DIR, or anything
// in it, that another user created was used as it was, so a DATA_DIR/pglite made 0777 by
// `nobody` received the database, and a key-encryption.key planted by `nobody` became the
// sealing secret. Now the service refuses to start, with one line (DataDirError) naming the path
// and what is wrong, when DATA_DIR or any entry in it is owned by another user or is a symbolic
// link, and when a directory above it can be changed by another user (who could put another
// DATA_DIR in its place). Loose modes on our own entries are still tightened. The gate's bundle
// cache file and its directory are held to the same rules (src/services/bundle-gate.ts).

/** A start-up refusal about where the service keeps its data: printed as one line, never a stack. */
export class DataDirError extends Error {
  override name = 'DataDirError';
}

const GROUP_OTHER = 0o077;
const STICKY = 0o1000;
const O_NOFOLLOW = constants.O_NOFOLLOW ?? 0;
const O_DIRECTORY = constants.O_DIRECTORY ?? 0;

/** This process's uid; undefined where there are none (Windows): no ownership is checked there. */
const myUid = (): number | undefined => process.getuid?.();

function ours(st: Stats): boolean {
  const uid = myUid();
  return uid === undefined || st.uid === uid;
}

/** A path as it may appear in a one-line message: absolute, control characters escaped. */
export function shownPath(path: string): string {
  return resolve(path).replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/** Whether this process is in group `gid` (its own or a supplementary one). */
const inMyGroups = (gid: number): boolean => process.getgid?.() === gid || (process.getgroups?.() ?? []).includes(gid);

const me = () => `this process's user (uid ${myUid()})`;
const mode = (st: Stats) => (st.mode & 0o7777).toString(8).padStart(3, '0');

function refuse(label: string, path: string, what: string): never {
  throw new DataDirError(`${label}: ${shownPath(path)} ${what}`);
}

/** The refusal of an entry owned by another user (what it is, which uid, what to do). */
function foreignOwner(label: string, path: string, st: Stats): never {
  refuse(label, path, `is owned by uid ${st.uid}, not by ${me()}: another user could have planted or read it; remove it, or check who made it, before starting`);
}

/**
 * A directory on the way to a private one is safe when only this user or root can change what
 * its entries name: owned by one of them, and writable by nobody else, unless sticky (as /tmp is:
 * there others cannot rename or remove what they do not own). Group write is accepted for a group
 * this process is in (a volume's fsGroup, a user's private group).
 */
function checkAncestor(label: string, target: string, path: string, st: Stats): void {
  const uid = myUid();
  if (uid === undefined) return;
  const whose = `so that user could put another directory in place of ${shownPath(target)}`;
  if (st.uid !== uid && st.uid !== 0) refuse(label, target, `is inside ${shownPath(path)}, which is owned by uid ${st.uid} (neither ${me()} nor root), ${whose}`);
  if ((st.mode & STICKY) !== 0) return;
  if ((st.mode & 0o002) !== 0) refuse(label, target, `is inside ${shownPath(path)}, which every user may write (mode ${mode(st)}, not sticky), so another user could put another directory in its place`);
  if ((st.mode & 0o020) !== 0 && !inMyGroups(st.gid)) {
    refuse(label, target, `is inside ${shownPath(path)}, which group ${st.gid} may write (mode ${mode(st)}), a group this process is not in`);
  }
}

/**
 * Checks every directory and symbolic link that `path` goes through, `path` itself included
 * (as a directory); returns its real path, or null when a part of it does not exist (yet).
 */
function walkPath(label: string, target: string, path: string, depth = 0): string | null {
  const abs = resolve(path);
  const root = parse(abs).root;
  let cur = root;
  checkAncestor(label, target, cur, lstatSync(cur));
  for (const name of abs.slice(root.length).split(sep).filter(Boolean)) {
    const next = join(cur, name);
    let st: Stats;
    try {
      st = lstatSync(next);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    if (st.isSymbolicLink()) {
      const uid = myUid();
      if (uid !== undefined && st.uid !== uid && st.uid !== 0) {
        refuse(label, target, `is reached through the symbolic link ${shownPath(next)}, owned by uid ${st.uid} (neither ${me()} nor root), who could point it elsewhere`);
      }
      if (depth >= 32) refuse(label, target, `is reached through too many symbolic links (at ${shownPath(next)})`);
      const real = walkPath(label, target, resolve(cur, readlinkSync(next)), depth + 1);
      if (real === null) return null;
      cur = real;
      continue;
    }
    if (!st.isDirectory()) refuse(label, target, `is reached through ${shownPath(next)}, which is not a directory`);
    checkAncestor(label, target, next, st);
    cur = next;
  }
  return cur;
}

/** Checks the directories above `path` (not `path` itself): see checkAncestor. */
export function checkParents(label: string, path: string): void {
  walkPath(label, path, dirname(resolve(path)));
}

/** Opens `dir` without following a symbolic link; the refusal names what is wrong. */
function openOwnDir(label: string, dir: string): { fd: number; st: Stats } {
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') refuse(label, dir, 'is a symbolic link: point it at the real directory instead');
    if (code === 'ENOTDIR') refuse(label, dir, 'is not a directory');
    throw err;
  }
  const st = fstatSync(fd);
  if (!ours(st)) {
    closeSync(fd);
    foreignOwner(label, dir, st);
  }
  return { fd, st };
}

/**
 * Creates `dir` (and missing parents) as 0700 and takes group/other access off it if it existed.
 * Refuses (DataDirError) a `dir` that is a symbolic link or owned by another user, and one whose
 * parents another user can change.
 */
export function ensurePrivateDir(dir: string, label = 'DATA_DIR'): void {
  try {
    if (lstatSync(dir).isSymbolicLink()) refuse(label, dir, 'is a symbolic link: point it at the real directory instead');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  checkParents(label, dir); // as far as they exist: nothing is created inside another user's directory
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // Again after creating: a part someone else created meanwhile is checked too.
  checkParents(label, dir);
  const { fd, st } = openOwnDir(label, dir);
  try {
    if ((st.mode & GROUP_OTHER) !== 0) fchmodSync(fd, st.mode & 0o7700 & ~GROUP_OTHER);
  } finally {
    closeSync(fd);
  }
}

/**
 * Checks a directory the service writes a file into that is not DATA_DIR's private tree (the
 * gate's bundle cache): owned by this user, not a symbolic link, writable by no other user (group
 * write only for a group this process is in), with safe parents. It is not tightened: it may be
 * an operator's. A directory that does not exist yet passes (`mustExist` false); its parents are
 * checked as far as they exist.
 */
export function checkOwnDir(label: string, dir: string, mustExist = true): void {
  try {
    lstatSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || mustExist) throw err;
    walkPath(label, dir, dir);
    return;
  }
  checkParents(label, dir);
  const { fd, st } = openOwnDir(label, dir);
  closeSync(fd);
  if (myUid() === undefined) return;
  if ((st.mode & 0o002) !== 0) refuse(label, dir, `may be written by every user (mode ${mode(st)}): another user could put files there; use a directory only this user can write (chmod o-w)`);
  if ((st.mode & 0o020) !== 0 && !inMyGroups(st.gid)) {
    refuse(label, dir, `may be written by group ${st.gid} (mode ${mode(st)}), a group this process is not in; use a directory only this user can write (chmod g-w)`);
  }
}

/**
 * Reads a file this user owns, opened without following a symbolic link and checked on the
 * opened file (fstat), so what is checked is what is read. Returns null when it does not exist.
 * A file of another user, a link or not a regular file is refused (DataDirError). `loose`: what
 * to do with group/other permission bits on our own file: take them off ('tighten', as for
 * DATA_DIR), or refuse a file others may write ('refuse-writable': its content cannot be trusted).
 */
export function readOwnFile(label: string, path: string, loose: 'tighten' | 'refuse-writable'): string | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') refuse(label, path, 'is a symbolic link, not a file of its own: remove it');
    throw err;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) refuse(label, path, 'is not a regular file');
    if (!ours(st)) foreignOwner(label, path, st);
    if (myUid() !== undefined) {
      if (loose === 'tighten' && (st.mode & 0o7177) !== 0) fchmodSync(fd, st.mode & 0o600);
      if (loose === 'refuse-writable' && (st.mode & 0o022) !== 0) {
        refuse(label, path, `may be written by other users (mode ${mode(st)}): what it holds cannot be trusted; remove it`);
      }
    }
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * Removes group and other permissions from `dir` and everything under it that this process's
 * user owns (directories stay 0700-ish, files 0600-ish: owner bits are kept as they are).
 * Symbolic links are not followed. An entry owned by another user, a symbolic link, or a
 * directory that cannot be read is a problem: with `onProblem` 'throw' (start-up) the first one
 * is refused (DataDirError); with 'collect' (shutdown) they are returned and the walk goes on.
 */
export function tightenTree(dir: string, onProblem: 'throw' | 'collect' = 'throw', label = 'DATA_DIR'): { changed: number; problems: string[] } {
  let changed = 0;
  const problems: string[] = [];
  const problem = (path: string, what: string) => {
    const message = `${label}: ${shownPath(path)} ${what}`;
    if (onProblem === 'throw') throw new DataDirError(message);
    problems.push(message);
  };
  const visit = (path: string) => {
    let st: Stats;
    try {
      st = lstatSync(path);
    } catch {
      return; // removed meanwhile (PGlite deletes temporary files)
    }
    if (st.isSymbolicLink()) return problem(path, 'is a symbolic link (the service makes none there): another user may have planted it; remove it');
    if (!ours(st)) {
      return problem(path, `is owned by uid ${st.uid}, not by ${me()}: another user could have planted or read it; remove it, or check who made it, before starting`);
    }
    if ((st.mode & GROUP_OTHER) !== 0) {
      try {
        chmodSync(path, st.mode & 0o7700 & ~GROUP_OTHER);
        changed++;
      } catch {
        /* removed meanwhile */
      }
    }
    if (st.isDirectory()) {
      let names: string[];
      try {
        names = readdirSync(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
        return problem(path, `cannot be listed to check what it holds (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
      for (const name of names) visit(join(path, name));
    }
  };
  visit(dir);
  return { changed, problems };
}
