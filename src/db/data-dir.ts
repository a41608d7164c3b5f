import { chmodSync, lstatSync, mkdirSync, readdirSync, type Stats } from 'node:fs';
import { join } from 'node:path';

// DATA_DIR holds the embedded database and the generated key-encryption secret: nobody but the
// service's own user may read or write anything in it (issue 17 finding 3). PGlite creates its
// files world-writable (0666, whatever the umask) inside directories that follow the umask
// (0755 by default); the directory itself at 0700 is what keeps other users out of files PGlite
// creates while it runs, and `tightenTree` brings every file we own to 0600 at start and stop.

const GROUP_OTHER = 0o077;

function ours(st: Stats): boolean {
  const uid = process.getuid?.();
  return uid === undefined || st.uid === uid;
}

/** Creates `dir` (and missing parents) as 0700, and takes group/other access off it if it existed. */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (ours(st) && (st.mode & GROUP_OTHER) !== 0) chmodSync(dir, st.mode & 0o7700 & ~GROUP_OTHER);
}

/**
 * Removes group and other permissions from `dir` and everything under it that this process's
 * user owns (directories stay 0700-ish, files 0600-ish: owner bits are kept as they are).
 * Symbolic links are not followed; entries owned by another user are left alone and returned.
 */
export function tightenTree(dir: string): { changed: number; foreign: string[] } {
  let changed = 0;
  const foreign: string[] = [];
  const visit = (path: string) => {
    let st: Stats;
    try {
      st = lstatSync(path);
    } catch {
      return; // removed meanwhile (PGlite deletes temporary files)
    }
    if (st.isSymbolicLink()) return;
    if (!ours(st)) {
      foreign.push(path);
      return;
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
      let names: string[] = [];
      try {
        names = readdirSync(path);
      } catch {
        return;
      }
      for (const name of names) visit(join(path, name));
    }
  };
  visit(dir);
  return { changed, foreign };
}
