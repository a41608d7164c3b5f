import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { migrate } from '../../src/db/migrate.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPostgres } from '../../src/db/postgres.js';
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
export async function createTestDatabase(opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const base = process.env.DATABASE_URL;
  if (!base) {
    const db = await openPglite(null);
    if (opts.migrate !== false) await migrate(db);
    return { db, url: null, drop: () => db.close() };
  }
  const name = `obs_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(base);
  u.pathname = `/${name}`;
  const url = u.toString();
  const db = openPostgres(url);
  if (opts.migrate !== false) await migrate(db);
  return {
    db,
    url,
    async drop() {
      await db.close();
      const a = new pg.Client({ connectionString: base });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}
