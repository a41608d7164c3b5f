import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listMigrations, migrate, splitStatements } from '../src/db/migrate.js';
import { openPglite, DataDirBusyError } from '../src/db/pglite.js';
import { openPostgres } from '../src/db/postgres.js';
import { openDatabase } from '../src/db/index.js';
import { backend, createTestDatabase } from './support/db.js';
import { collectWarnings } from './support/warnings.js';
import { loadConfig } from '../src/config.js';
import { telemetryStore } from '../src/store/telemetry.js';
import { receiptStore } from '../src/store/receipts.js';
import { scoreInputs } from '../src/store/score-inputs.js';
import { scoreStore } from '../src/store/scores.js';

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

  it('runs a statement given a prepare name like any other, again and again, in and out of a transaction', async () => {
    const t = await createTestDatabase();
    try {
      for (let i = 0; i < 3; i++) expect(await t.db.query('SELECT $1::int + 1 AS x', [i], { prepare: 'test_add_one' })).toEqual([{ x: i + 1 }]);
      expect(await t.db.transaction((tx) => tx.query('SELECT $1::int + 1 AS x', [41], { prepare: 'test_add_one' }))).toEqual([{ x: 42 }]);
    } finally {
      await t.drop();
    }
  });

  it.runIf(backend === 'postgres')('PostgreSQL keeps a statement given a prepare name prepared on its connection, the hot appends and score computations among them; DATABASE_PREPARED_STATEMENTS=off prepares none', async () => {
    const t = await createTestDatabase();
    // One connection, so that pg_prepared_statements (per session) shows what the pool's statements left.
    const on = openPostgres(t.url!, { max: 1 });
    const off = openPostgres(t.url!, { max: 1, prepared: false });
    const prepared = async (db: typeof on) => (await db.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).map((r) => r.name);
    try {
      const { id } = (await on.query<{ id: number }>("INSERT INTO servers (url, name, slug, category) VALUES ('https://prepared.example.com/mcp', 'prepared', 'prepared', 'general') RETURNING id"))[0]!;
      const row = { serverId: id, at: new Date(), source: 'anon:test', report: { success: true, latency_ms: 12, tool_name: 'search', http_status: 200 } };
      for (const db of [on, off]) {
        await telemetryStore(db).append([row as never, row as never]);
        await receiptStore(db).insertMany([{ receipt_id: `r-${db === on ? 'on' : 'off'}`, kind: 'preflight', sub: 'https://prepared.example.com/mcp', issued_at: new Date(), kid: 'k', claim: { verdict: 'PASS' }, jws: 'a.b.c' }]);
        await db.query('SELECT $1::int AS x', [1], { prepare: 'test_one' });
        await db.transaction((tx) => tx.query('SELECT $1::int AS x', [2], { prepare: 'test_one' }));
      }
      // A score computation: its read of the inputs and its write of the result.
      for (const db of [on, off]) {
        expect((await scoreInputs(db, [id], new Date(0), new Date())).size).toBe(1);
        await scoreStore(db).save([{ server_id: id, trust_score: 50, verdict: 'UNCERTAIN', anomaly_flags: [], evidence_reports: 2, computed_at: new Date(), bucket: new Date() } as never]);
      }
      expect(await prepared(on)).toEqual(['receipts_append', 'score_inputs', 'scores_save', 'telemetry_append', 'test_one']);
      expect(await prepared(off)).toEqual([]);
      expect((await on.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry WHERE server_id = $1', [id]))[0]!.n).toBe(4);
    } finally {
      await on.close();
      await off.close();
      await t.drop();
    }
  });

  it.runIf(backend === 'postgres')('a transaction whose connection the server ends (between statements or during one) fails, and the process lives on', async () => {
    const t = await createTestDatabase();
    // pg emits 'error' on a client whose connection ends; a checked-out client has no listener of
    // the pool's, so without one of ours that error ends the process (the reliability script's
    // database outage did so now and then: a transaction open when PostgreSQL stopped).
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown) => uncaught.push(e);
    process.on('uncaughtException', onUncaught);
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    // The server ends the connection as a restart or failover does: from another session.
    const admin = new pg.Client({ connectionString: t.url! });
    await admin.connect();
    const terminate = (pid: number) => admin.query('SELECT pg_terminate_backend($1)', [pid]);
    try {
      // Ended while the transaction waits between two statements (no statement in flight).
      await expect(
        t.db.transaction(async (tx) => {
          const { pid } = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]!;
          await terminate(pid);
          await sleep(300);
          await tx.query('SELECT 1');
        }),
      ).rejects.toThrow();
      // Ended during a statement; the caller's code goes on awaiting before the failure surfaces.
      await expect(
        t.db.transaction(async (tx) => {
          const { pid } = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]!;
          const killer = sleep(100).then(() => terminate(pid));
          try {
            await tx.query('SELECT pg_sleep(5)');
          } catch (e) {
            await killer;
            await sleep(300);
            throw e;
          }
        }),
      ).rejects.toThrow();
      await sleep(100);
      expect(uncaught).toEqual([]);
      // The pool replaced the lost connections.
      expect(await t.db.transaction((tx) => tx.query<{ x: number }>('SELECT 1 AS x'))).toEqual([{ x: 1 }]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await admin.end();
      await t.drop();
    }
  });

  it.runIf(backend === 'postgres')('a named statement the server no longer has (a pooler that does not carry them) runs unnamed, and names are off from then on, with one warning', async () => {
    const t = await createTestDatabase();
    const db = openPostgres(t.url!, { max: 1 });
    const warnings = collectWarnings();
    try {
      expect(await db.query('SELECT $1::int AS x', [1], { prepare: 'test_lost' })).toEqual([{ x: 1 }]);
      // Behind the client's back, as a pooler handing over another server connection would.
      await db.query('DEALLOCATE test_lost');
      expect(await db.query('SELECT $1::int AS x', [2], { prepare: 'test_lost' })).toEqual([{ x: 2 }]);
      expect(await db.query('SELECT $1::int AS x', [3], { prepare: 'test_lost_too' })).toEqual([{ x: 3 }]);
      expect(await db.query('SELECT name FROM pg_prepared_statements')).toEqual([]);
      await new Promise((r) => setImmediate(r));
      expect(warnings.named('PreparedStatementsWarning')).toHaveLength(1);
      expect(warnings.list.join('\n')).toMatch(/26000.*DATABASE_PREPARED_STATEMENTS=off/);
    } finally {
      warnings.stop();
      await db.close();
      await t.drop();
    }
  });

  it('DATABASE_PREPARED_STATEMENTS is on unless turned off, and refuses what is not a boolean', () => {
    expect(loadConfig({}).databasePreparedStatements).toBe(true);
    expect(loadConfig({ DATABASE_PREPARED_STATEMENTS: 'off' }).databasePreparedStatements).toBe(false);
    expect(() => loadConfig({ DATABASE_PREPARED_STATEMENTS: 'sometimes' })).toThrow(/DATABASE_PREPARED_STATEMENTS/);
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
