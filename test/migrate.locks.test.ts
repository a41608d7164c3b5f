import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MigrationLockError, migrate, MIGRATIONS_DIR } from '../src/db/migrate.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { within } from './support/within.js';

// Audit finding 5: the migration transaction had no lock_timeout. During a rollout, a new
// migration's ALTER TABLE (ACCESS EXCLUSIVE) queued behind an old instance's long transaction on
// that table, and every later statement on the table, the old instances' writes included, queued
// behind the migration for as long as that transaction lasted. Now each migration statement waits
// at most its lock timeout, the transaction is retried with a pause, and start-up fails with a
// clear error when it never gets the locks. No timing assertion: the old instance's write must
// complete while the long transaction is still open (the code before waits for it to end).

if (backend !== 'postgres') console.log('SKIP migrations against a conflicting lock: needs PostgreSQL (set DATABASE_URL); on PGlite only one process ever migrates');

describe.skipIf(backend !== 'postgres')('a migration meeting a lock another session holds (PostgreSQL)', () => {
  let tdb: TestDatabase;
  let dir: string;
  let holder: pg.Client | null = null;
  const NEW = '9990_migrate_lock_test.sql';
  const hold = async () => {
    holder = new pg.Client({ connectionString: tdb.url! });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM servers'); // an old instance's long transaction: ACCESS SHARE until it ends
  };
  const release = async () => {
    const h = holder;
    holder = null;
    await h?.query('COMMIT').catch(() => {});
    await h?.end().catch(() => {});
  };
  const columnExists = async () =>
    (await tdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = 'servers' AND column_name = 'migrate_lock_test'"))[0]!.n === 1;

  beforeAll(async () => {
    tdb = await createTestDatabase();
    // The shipped migrations (all applied) and one new one that alters a hot table.
    dir = mkdtempSync(join(tmpdir(), 'obs-migrations-'));
    cpSync(MIGRATIONS_DIR, dir, { recursive: true });
    writeFileSync(join(dir, NEW), 'ALTER TABLE servers ADD COLUMN migrate_lock_test int;\n');
  }, 300_000);
  afterAll(async () => {
    await release();
    await tdb?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('gives up its lock request within its bound, retries, then fails start-up with a clear error; meanwhile the old instances write', async () => {
    await hold();
    const safety = setTimeout(() => void release(), 90_000);
    const writer = new pg.Client({ connectionString: tdb.url! }); // no lock_timeout: it waits as long as it is made to
    writer.on('error', () => {});
    await writer.connect();
    try {
      const run = migrate(tdb.db, dir, { lockTimeoutMs: 300, attempts: 3, backoffMs: 200 }).then(() => null, (e: unknown) => e);
      // Wait until the migration's ACCESS EXCLUSIVE request is queued, then an old instance writes.
      for (let i = 0; i < 100; i++) {
        const [w] = await tdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND NOT granted AND relation = 'servers'::regclass");
        if (w!.n > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      await within(
        writer.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://rollout.example.com/mcp', 'rollout', 'rollout', 'general')"),
        30_000,
        "an old instance's write",
      );
      const err = await within(run, 60_000, 'the migration');
      expect(err).toBeInstanceOf(MigrationLockError);
      expect((err as Error).message).toMatch(/could not get the table locks.*3 attempts.*55P03.*nothing was applied/s);
      expect(await columnExists()).toBe(false);
      expect(await tdb.db.query('SELECT 1 FROM schema_migrations WHERE name = $1', [NEW])).toEqual([]);
    } finally {
      clearTimeout(safety);
      await writer.end().catch(() => {});
      await release();
    }
  }, 180_000);

  it('applies the migration on a later attempt once the other session has let go', async () => {
    await hold();
    const safety = setTimeout(() => void release(), 90_000);
    try {
      const run = migrate(tdb.db, dir, { lockTimeoutMs: 300, attempts: 20, backoffMs: 100 });
      await new Promise((r) => setTimeout(r, 1000));
      await release();
      expect(await within(run, 60_000, 'the migration')).toEqual([NEW]);
      expect(await columnExists()).toBe(true);
    } finally {
      clearTimeout(safety);
      await release();
    }
  }, 180_000);
});
