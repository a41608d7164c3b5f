import { migrate } from '../../src/db/migrate.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPostgres } from '../../src/db/postgres.js';
import { createScratchDatabase } from '../../src/db/scratch.js';
import type { Db } from '../../src/db/index.js';

/** Which backend this test run uses: the real PostgreSQL when DATABASE_URL is set, else PGlite. */
export const backend: 'postgres' | 'pglite' = process.env.DATABASE_URL ? 'postgres' : 'pglite';

export interface TestDatabase {
  db: Db;
  /** Connection string of this test's own database (postgres only). */
  url: string | null;
  drop(): Promise<void>;
}

/** A fresh PostgreSQL database (named for this test) cloned from nothing, or an in-memory PGlite. */
export async function createTestDatabase(opts: { migrate?: boolean; migrationsDir?: string } = {}): Promise<TestDatabase> {
  const base = process.env.DATABASE_URL;
  if (!base) {
    const db = await openPglite(null);
    if (opts.migrate !== false) await migrate(db, opts.migrationsDir);
    return { db, url: null, drop: () => db.close() };
  }
  const scratch = await createScratchDatabase(base, 'obs_test');
  const db = openPostgres(scratch.url);
  if (opts.migrate !== false) await migrate(db, opts.migrationsDir);
  return {
    db,
    url: scratch.url,
    async drop() {
      await db.close();
      await scratch.drop();
    },
  };
}

/**
 * Folds every committed raw report into the rollups now (one aggregator pass on this handle
 * folds what any instance appended): for tests that read the rollup tables with SQL directly.
 * Reads through the service settle by themselves (src/store/rollup-aggregator.ts).
 */
export async function foldRollups(db: Db): Promise<void> {
  const { rollupAggregator } = await import('../../src/store/rollup-aggregator.js');
  while (!(await rollupAggregator(db).pass()).complete);
}
