import { PGlite } from '@electric-sql/pglite';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Db, Queryable, Row } from './db.js';

export class DataDirBusyError extends Error {}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * PGlite is a single-process database: two processes on one data directory would corrupt it.
 * A pid lock file makes the second one fail fast with a message that says what to do.
 */
function lockDataDir(dir: string): () => void {
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, 'observatory.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      return () => rmSync(lock, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number(readFileSync(lock, 'utf8').trim());
      if (Number.isInteger(holder) && holder !== process.pid && pidAlive(holder)) {
        throw new DataDirBusyError(
          `the embedded database in ${resolve(dir)} is in use by process ${holder}; stop it first, or set DATABASE_URL to share a PostgreSQL server`,
        );
      }
      rmSync(lock, { force: true }); // stale lock from a process that died
    }
  }
  throw new DataDirBusyError(`could not lock ${resolve(dir)}`);
}

/** Opens embedded PostgreSQL. `dataDir` null keeps everything in memory (tests). */
export async function openPglite(dataDir: string | null): Promise<Db> {
  const unlock = dataDir === null ? () => {} : lockDataDir(dataDir);
  let pg: PGlite;
  try {
    // numeric arrives as a string by default; int8 already as a number. Same rule as postgres.ts.
    const parsers = { 1700: (v: string) => Number(v), 20: (v: string) => Number(v) };
    pg = dataDir === null ? await PGlite.create({ parsers }) : await PGlite.create({ dataDir: join(dataDir, 'pglite'), parsers });
  } catch (err) {
    unlock();
    throw err;
  }
  const wrap = (q: { query: PGlite['query'] }): Queryable => ({
    async query<T = Row>(sql: string, params?: readonly unknown[]) {
      const res = await q.query<T>(sql, params as unknown[] | undefined);
      return res.rows;
    },
  });
  const base = wrap(pg);
  let closed = false;
  return {
    kind: 'pglite',
    query: base.query,
    async exec(sql) {
      await pg.exec(sql);
    },
    transaction(fn) {
      return pg.transaction((tx) => fn(wrap(tx)));
    },
    async ping() {
      try {
        await pg.query('SELECT 1');
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await pg.close();
      unlock();
    },
  };
}
