import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listMigrations, migrate, splitStatements } from '../src/db/migrate.js';
import { openPglite, DataDirBusyError } from '../src/db/pglite.js';
import { openPostgres } from '../src/db/postgres.js';
import { openDatabase } from '../src/db/index.js';
import { backend, createTestDatabase } from './support/db.js';

describe(`storage (${backend})`, () => {
  it('applies every migration once; a second run applies nothing', async () => {
    const t = await createTestDatabase({ migrate: false });
    try {
      const first = await migrate(t.db);
      expect(first).toEqual(listMigrations().map((m) => m.name));
      expect(await migrate(t.db)).toEqual([]);
    } finally {
      await t.drop();
    }
  });

  it('normalises int8 and numeric to numbers and timestamps to Date on both backends', async () => {
    const t = await createTestDatabase();
    try {
      const [row] = await t.db.query<{ a: unknown; b: unknown; c: unknown }>("SELECT 9007199254740::int8 AS a, 1.5::numeric AS b, now() AS c");
      expect(row).toEqual({ a: 9007199254740, b: 1.5, c: expect.any(Date) });
    } finally {
      await t.drop();
    }
  });

  it('rolls a failed transaction back', async () => {
    const t = await createTestDatabase();
    try {
      await expect(
        t.db.transaction(async (tx) => {
          await tx.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://tx.example.com', 'tx', 'tx', 'general')");
          throw new Error('boom');
        }),
      ).rejects.toThrow('boom');
      expect(await t.db.query("SELECT 1 FROM servers WHERE url = 'https://tx.example.com'")).toHaveLength(0);
    } finally {
      await t.drop();
    }
  });

  it('splits scripts on statement ends but keeps $$ bodies whole', () => {
    expect(splitStatements('CREATE TABLE a (x int);\n-- note\nCREATE FUNCTION f() RETURNS int AS $$\nBEGIN\n RETURN 1;\nEND;\n$$ LANGUAGE plpgsql;\n')).toHaveLength(2);
  });

  it.runIf(backend === 'postgres')('two instances migrating at once apply each migration exactly once', async () => {
    const t = await createTestDatabase({ migrate: false });
    const a = openPostgres(t.url!);
    const b = openPostgres(t.url!);
    try {
      const [ra, rb] = await Promise.all([migrate(a), migrate(b)]);
      expect([...ra, ...rb].sort()).toEqual(listMigrations().map((m) => m.name).sort());
      const rows = await a.query<{ n: number }>('SELECT count(*)::int8 AS n FROM schema_migrations');
      expect(rows[0]!.n).toBe(listMigrations().length);
    } finally {
      await a.close();
      await b.close();
      await t.drop();
    }
  });

  it.runIf(backend === 'postgres')('data survives closing and reopening the pool', async () => {
    const t = await createTestDatabase();
    try {
      await t.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://persist.example.com', 'p', 'p', 'general')");
      const again = await openDatabase({ databaseUrl: t.url!, dataDir: '' });
      expect(await again.query("SELECT 1 FROM servers WHERE url = 'https://persist.example.com'")).toHaveLength(1);
      await again.close();
    } finally {
      await t.drop();
    }
  });

  it('embedded data survives a restart, and a second process on the same directory is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'obs-pglite-'));
    try {
      const first = await openDatabase({ databaseUrl: null, dataDir: dir });
      await first.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://persist.example.com', 'p', 'p', 'general')");
      // Same process, second open: the lock names us, so only a foreign live pid is refused. Fake one.
      await first.close();
      const second = await openDatabase({ databaseUrl: null, dataDir: dir });
      expect(await second.query("SELECT 1 FROM servers WHERE url = 'https://persist.example.com'")).toHaveLength(1);
      await second.close();
      const { writeFileSync } = await import('node:fs');
      writeFileSync(join(dir, 'observatory.lock'), String(process.ppid));
      await expect(openPglite(dir)).rejects.toBeInstanceOf(DataDirBusyError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
