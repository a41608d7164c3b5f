import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, MIGRATIONS_DIR } from '../../src/db/migrate.js';
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
    if (opts.migrate === false) {
      const db = await openPglite(null);
      return { db, url: null, drop: () => db.close() };
    }
    const db = await openPglite(null, { loadDataDir: await migratedTemplate(opts.migrationsDir) });
    // Migrations newer than the template (none, unless a test brings its own directory) still run.
    await migrate(db, opts.migrationsDir);
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
 * A migrated PGlite cluster as a tarball, made once per migration set and PGlite version and
 * kept in the temporary directory: a fresh in-memory cluster costs an initdb (seconds of WASM
 * on a loaded machine), loading the template does not. Written to a temporary name and renamed,
 * so parallel test workers never read a half-written template.
 */
async function migratedTemplate(migrationsDir = MIGRATIONS_DIR): Promise<Blob> {
  const hash = createHash('sha256');
  hash.update(JSON.parse(readFileSync(join(import.meta.dirname, '../../node_modules/@electric-sql/pglite/package.json'), 'utf8')).version);
  for (const f of readdirSync(migrationsDir).sort()) hash.update(f).update(readFileSync(join(migrationsDir, f)));
  const file = join(privateTempDir(), `pglite-template-${hash.digest('hex').slice(0, 16)}.tar`);
  try {
    return new Blob([readFileSync(file)]);
  } catch {
    const db = await openPglite(null);
    try {
      await migrate(db, migrationsDir);
      const tar = Buffer.from(await (await db.snapshot!()).arrayBuffer());
      const partial = `${file}.${process.pid}.${Date.now()}`;
      writeFileSync(partial, tar, { mode: 0o600 });
      renameSync(partial, file);
      return new Blob([tar]);
    } finally {
      await db.close();
    }
  }
}

/** This user's own directory under the temporary directory (0700, owned by us), so another local user cannot plant a template. */
function privateTempDir(): string {
  const dir = join(tmpdir(), `observatory-test-${process.getuid?.() ?? 'user'}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory() || (process.getuid && st.uid !== process.getuid()) || (st.mode & 0o077) !== 0) {
    throw new Error(`${dir} must be a directory owned by this user with mode 0700`);
  }
  return dir;
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
