import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { join } from 'node:path';
import { lockDataDir } from './data-dir-lock.js';
import type { Db, Liveness, Queryable, Row } from './db.js';
import { ensurePrivateDir, tightenTree } from './data-dir.js';
import { createTransactionGuard, transactionGuardDefault } from './transaction-guard.js';

export { DataDirBusyError } from './data-dir-lock.js';

/** A transaction rolled back by the stall watchdog (see PgliteOptions.stallAfterMs). */
export class TransactionStalledError extends Error {
  override name = 'TransactionStalledError';
}

/**
 * PGlite is a single-process database: two processes on one data directory would corrupt it.
 * Before anything is read or written there, DATA_DIR and everything in it must be this user's
 * and hold no symbolic link (src/db/data-dir.ts): otherwise start-up stops with a DataDirError.
 * Then the lock (src/db/data-dir-lock.ts) makes a second process fail fast with a message that
 * says what to do, containers included.
 */
async function lockPrivateDataDir(dir: string): Promise<() => void> {
  ensurePrivateDir(dir);
  tightenTree(dir);
  return lockDataDir(dir);
}

export interface PgliteOptions {
  /**
   * Refuse statements sent through the outer handle from inside an open transaction
   * (src/db/transaction-guard.ts). Default: on unless NODE_ENV=production.
   */
  guard?: boolean;
  /**
   * Stall watchdog: a transaction that has no statement running for this long while other
   * statements wait for the database is rolled back with TransactionStalledError (0 = off).
   * On one connection that state is a self-deadlock (the transaction awaits something that
   * waits for the transaction), so the watchdog turns a frozen database into one failed call.
   */
  stallAfterMs?: number;
  /** liveness(): how long the probe statement may wait before the database counts as wedged (unless it made progress meanwhile). */
  livenessTimeoutMs?: number;
  /**
   * In-memory only: start from this data-directory snapshot (a tarball from `snapshot()`)
   * instead of an empty cluster, skipping initdb (tests start from a migrated template).
   */
  loadDataDir?: Blob;
}

/** Default stall limit: far above any pause between two statements of a healthy transaction. */
export const DEFAULT_STALL_AFTER_MS = 10_000;
/** Default bound of the /healthz probe statement. */
export const DEFAULT_LIVENESS_TIMEOUT_MS = 5_000;

/** Opens embedded PostgreSQL. `dataDir` null keeps everything in memory (tests). */
export async function openPglite(dataDir: string | null, opts: PgliteOptions = {}): Promise<Db> {
  const unlock = dataDir === null ? () => {} : await lockPrivateDataDir(dataDir);
  let pg: PGlite;
  try {
    // numeric arrives as a string by default; int8 already as a number. Same rule as postgres.ts.
    const parsers = { 1700: (v: string) => Number(v), 20: (v: string) => Number(v) };
    // pg_trgm (a contrib extension PGlite ships): the trigram index of server search (migration 1570).
    const extensions = { pg_trgm };
    pg =
      dataDir === null
        ? await PGlite.create({ parsers, extensions, loadDataDir: opts.loadDataDir })
        : await PGlite.create({ dataDir: join(dataDir, 'pglite'), parsers, extensions });
    if (dataDir !== null) {
      try {
        tightenTree(dataDir); // PGlite's new files are 0666: 0600 now
      } catch (err) {
        await pg.close().catch(() => {});
        throw err;
      }
    }
  } catch (err) {
    unlock();
    throw err;
  }
  const guard = createTransactionGuard('pglite', opts.guard ?? transactionGuardDefault());
  const stallAfterMs = opts.stallAfterMs ?? DEFAULT_STALL_AFTER_MS;
  const livenessTimeoutMs = opts.livenessTimeoutMs ?? DEFAULT_LIVENESS_TIMEOUT_MS;

  // Progress bookkeeping for the watchdog and liveness(): statements waiting or running through
  // the outer handle, and when any statement (outer or inside a transaction) last finished.
  let outerPending = 0;
  let lastProgress = Date.now();
  const outer = async <T>(op: string, run: () => Promise<T>): Promise<T> => {
    guard.check(op);
    if (outerPending++ === 0) lastProgress = Date.now();
    try {
      return await run();
    } finally {
      outerPending--;
      lastProgress = Date.now();
    }
  };

  let closed = false;
  let probe: Promise<void> | null = null;
  return {
    kind: 'pglite',
    ephemeral: dataDir === null,
    snapshot: () => outer('a snapshot', () => pg.dumpDataDir('none')),
    query<T = Row>(sql: string, params?: readonly unknown[]) {
      return outer('a query', async () => (await pg.query<T>(sql, params as unknown[] | undefined)).rows);
    },
    exec(sql) {
      return outer('a script', async () => {
        await pg.exec(sql);
      });
    },
    async transaction(fn) {
      guard.check('a nested transaction');
      if (outerPending++ === 0) lastProgress = Date.now();
      let waiting = true;
      try {
        return await pg.transaction(async (raw) => {
          waiting = false;
          outerPending--; // it holds the connection now
          let running = 0;
          let lastActivity = Date.now();
          let stalled: Error | null = null;
          const tx: Queryable = {
            async query<T = Row>(sql: string, params?: readonly unknown[]) {
              if (stalled) throw stalled;
              running++;
              lastActivity = Date.now();
              try {
                return (await raw.query<T>(sql, params as unknown[] | undefined)).rows;
              } finally {
                running--;
                lastActivity = lastProgress = Date.now();
              }
            },
          };
          const body = guard.run(() => fn(tx));
          if (stallAfterMs <= 0) return body;
          body.catch(() => {}); // after a stall its rejection (if any) has nobody left to tell
          let timer: NodeJS.Timeout | undefined;
          const watchdog = new Promise<never>((_, reject) => {
            timer = setInterval(
              () => {
                const idleFor = Date.now() - lastActivity;
                if (running === 0 && outerPending > 0 && idleFor >= stallAfterMs) {
                  stalled = new TransactionStalledError(
                    `a transaction on the embedded database ran no statement for ${idleFor} ms while ${outerPending} other statement(s) waited for the database: it awaits something that needs the database (a self-deadlock on PGlite's single connection); rolled back`,
                  );
                  process.emitWarning(stalled.message, 'TransactionStalledWarning');
                  reject(stalled);
                }
              },
              Math.max(10, Math.min(1000, Math.floor(stallAfterMs / 4))),
            );
            timer.unref();
          });
          try {
            return await Promise.race([body, watchdog]);
          } finally {
            clearInterval(timer);
          }
        });
      } finally {
        if (waiting) outerPending--; // never got the connection (closed database)
        lastProgress = Date.now();
      }
    },
    async ping() {
      try {
        await outer('a ping', () => pg.query('SELECT 1'));
        return true;
      } catch {
        return false;
      }
    },
    async liveness(): Promise<Liveness> {
      if (closed) return { live: false, reason: 'the embedded database is closed' };
      // One probe statement at a time, however many health checks ask.
      probe ??= (async () => {
        try {
          await outer('the liveness probe', () => pg.query('SELECT 1'));
        } finally {
          probe = null;
        }
      })();
      const current = probe;
      let timer: NodeJS.Timeout | undefined;
      const answered = await Promise.race([
        current.then(
          () => true,
          () => true,
        ),
        new Promise<false>((r) => {
          timer = setTimeout(() => r(false), livenessTimeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
      if (answered) return { live: true };
      // Busy is not wedged: under load the probe queues behind other statements that do finish.
      const quietFor = Date.now() - lastProgress;
      if (quietFor < livenessTimeoutMs) return { live: true };
      return {
        live: false,
        reason: `the embedded database has finished no statement for ${Math.round(quietFor / 1000)} s while ${outerPending} wait for it`,
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      await pg.close();
      if (dataDir !== null) {
        // Nobody else can add entries to a 0700 DATA_DIR but root: say so if one did meanwhile.
        for (const p of tightenTree(dataDir, 'collect').problems) process.emitWarning(p, 'DataDirWarning');
      }
      unlock();
    },
  };
}
