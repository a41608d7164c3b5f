// Raw telemetry partitioned by month with TELEMETRY_RETENTION_DAYS (migration 1000, the
// telemetry-partitions job). Runs on PGlite, or on PostgreSQL when DATABASE_URL is set.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { migrate } from '../src/db/migrate.js';
import type { Db } from '../src/db/index.js';
import { addMonths, partitionFor, planPartitions, type TelemetryPartition } from '../src/domain/telemetry-partitions.js';
import { createTelemetryRetention } from '../src/services/telemetry-retention.js';
import { createTrustEngine } from '../src/services/trust-engine.js';
import type { ServerRow } from '../src/store/servers.js';
import { telemetryPartitionStore } from '../src/store/telemetry-partitions.js';
import { telemetryStore, type IngestRow } from '../src/store/telemetry.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { startTestApp } from './support/app.js';

const MIGRATIONS = fileURLToPath(new URL('../src/db/migrations', import.meta.url));
const d = (iso: string) => new Date(iso);
const names = (ps: readonly TelemetryPartition[]) => ps.map((p) => p.name);

describe('partition plan (pure)', () => {
  const at = d('2026-06-15T10:00:00Z');
  const existing = ['2025-01-01', '2025-05-01', '2026-06-01'].map((m) => partitionFor(d(`${m}T00:00:00Z`)));

  it('names monthly partitions by their UTC month and bounds them at UTC month starts', () => {
    expect(partitionFor(d('2026-12-31T23:59:59.999Z'))).toEqual({ name: 'telemetry_p2026_12', from: d('2026-12-01T00:00:00Z'), to: d('2027-01-01T00:00:00Z') });
    expect(addMonths(d('2026-11-20T05:00:00Z'), -11)).toEqual(d('2025-12-01T00:00:00Z'));
  });

  it('creates this month and the next two, drops only partitions entirely older than the retention', () => {
    const plan = planPartitions({ at, retentionDays: 400, existing, defaultMonths: [] });
    expect(names(plan.create)).toEqual(['telemetry_p2026_07', 'telemetry_p2026_08']);
    // cutoff 2025-05-11: January ends before it; May ends after it and is kept whole.
    expect(plan.cutoff).toEqual(d('2025-05-11T10:00:00Z'));
    expect(names(plan.drop)).toEqual(['telemetry_p2025_01']);
  });

  it('gives a partition to months stranded in the default partition, unless expired or far ahead', () => {
    const plan = planPartitions({ at, retentionDays: 400, existing, defaultMonths: [d('2024-03-01T00:00:00Z'), d('2026-02-01T00:00:00Z'), d('2031-01-01T00:00:00Z')] });
    expect(names(plan.create)).toEqual(['telemetry_p2026_02', 'telemetry_p2026_07', 'telemetry_p2026_08']);
  });

  it('keeps everything with retention 0', () => {
    const plan = planPartitions({ at, retentionDays: 0, existing, defaultMonths: [d('2001-01-01T00:00:00Z')] });
    expect(plan.drop).toEqual([]);
    expect(plan.cutoff).toBeNull();
    expect(names(plan.create)).toContain('telemetry_p2001_01');
  });
});

describe('TELEMETRY_RETENTION_DAYS', () => {
  it('defaults to 400 days, accepts 0 (keep forever) and at least 183 days, refuses the rest', () => {
    expect(loadConfig({}).telemetryRetentionDays).toBe(400);
    expect(loadConfig({ TELEMETRY_RETENTION_DAYS: '0' }).telemetryRetentionDays).toBe(0);
    expect(loadConfig({ TELEMETRY_RETENTION_DAYS: '183' }).telemetryRetentionDays).toBe(183);
    for (const bad of ['30', '-1', '1.5', 'forever', '99999999']) {
      expect(() => loadConfig({ TELEMETRY_RETENTION_DAYS: bad })).toThrow(ConfigError);
    }
    expect(() => loadConfig({ TELEMETRY_RETENTION_DAYS: '30' })).toThrow(/TELEMETRY_RETENTION_DAYS/);
  });
});

describe('partitioned telemetry on the database', () => {
  let tdb: TestDatabase | null = null;
  afterEach(async () => {
    await tdb?.drop().catch(() => {});
    tdb = null;
  });

  const partitionOf = async (db: Db) =>
    db.query<{ tool_name: string; part: string }>('SELECT tool_name, tableoid::regclass::text AS part FROM telemetry ORDER BY tool_name');

  async function server(db: Db, url = 'https://parts.example.com/mcp'): Promise<ServerRow> {
    // Plain SQL: the migration test runs it on a schema older than the store's (no server_handles yet).
    const [row] = await db.query<ServerRow>(
      `INSERT INTO servers (url, name, slug, category, registered_at) VALUES ($1, 'parts', 'parts', 'search', $2)
       ON CONFLICT (url) DO UPDATE SET url = EXCLUDED.url RETURNING id, url, name, slug, category, registered_at`,
      [url, d('2020-01-01T00:00:00Z')],
    );
    return row!;
  }
  const row = (s: ServerRow, at: string, tool: string, source = 'src:a'): IngestRow => ({
    serverId: s.id,
    at: d(at),
    source,
    report: { server_url: s.url, success: !tool.endsWith('fail'), latency_ms: 80, tool_name: tool, http_status: 200 },
  });

  it('the migration turns existing rows into monthly partitions, keeps their ids, and old rows land in the default partition', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'obs-mig-'));
    try {
      for (const f of readdirSync(MIGRATIONS).filter((f) => f < '1000')) copyFileSync(join(MIGRATIONS, f), join(dir, f));
      tdb = await createTestDatabase({ migrationsDir: dir });
      const { db } = tdb;
      const s = await server(db);
      const lastMonth = addMonths(new Date(), -1);
      await db.query(
        `INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status)
         VALUES ($1, now(), true, 10, 'now', 200), ($1, $2, false, 20, 'last-month', 503), ($1, '1990-06-01T00:00:00Z', true, 30, 'ancient', null)`,
        [s.id, new Date(lastMonth.getTime() + 3 * 86_400_000)],
      );
      const before = await db.query<{ id: number; tool_name: string }>('SELECT id, tool_name FROM telemetry ORDER BY id');

      expect(await migrate(db)).toContain('1000_telemetry_partitioned.sql');
      const [kind] = await db.query<{ relkind: string }>("SELECT relkind::text FROM pg_class WHERE relname = 'telemetry'");
      expect(kind!.relkind).toBe('p');
      expect(await db.query<{ id: number; tool_name: string }>('SELECT id, tool_name FROM telemetry ORDER BY id')).toEqual(before);
      const parts = new Map((await partitionOf(db)).map((r) => [r.tool_name, r.part]));
      expect(parts.get('now')).toBe(partitionFor(new Date()).name);
      expect(parts.get('last-month')).toBe(partitionFor(lastMonth).name);
      expect(parts.get('ancient')).toBe('telemetry_default'); // more than 120 months back
      const months = names(await telemetryPartitionStore(db).list());
      expect(months).toContain(partitionFor(addMonths(new Date(), 2)).name);
      // The id sequence carries on after the copied rows; the primary key includes received_at.
      await telemetryStore(db).insertMany([row(s, new Date().toISOString(), 'after')]);
      const [after] = await db.query<{ id: number }>("SELECT id FROM telemetry WHERE tool_name = 'after'");
      expect(after!.id).toBeGreaterThan(Math.max(...before.map((r) => r.id)));
      const pk = await db.query<{ def: string }>("SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'telemetry'::regclass AND contype = 'p'");
      expect(pk[0]!.def).toMatch(/received_at/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the job creates upcoming partitions; rows land in their month; the default partition takes rows no partition covers', async () => {
    tdb = await createTestDatabase();
    const { db } = tdb;
    const at = d('2031-03-10T12:00:00Z');
    const retention = createTelemetryRetention({ db, config: loadConfig({}), now: () => at }, { runAtStartup: false });
    try {
      const run = await retention.maintain(at);
      expect(run.created).toEqual(['telemetry_p2031_03', 'telemetry_p2031_04', 'telemetry_p2031_05']);
      // The partitions the migration made for the real current months are years older than this clock.
      expect(run.dropped.every((n) => n < 'telemetry_p2030_02')).toBe(true);
      expect((await retention.maintain(at)).created).toEqual([]); // idempotent

      const s = await server(db);
      await telemetryStore(db).insertMany([
        row(s, '2031-03-01T00:00:00.000Z', 'a-first-instant-of-march'),
        row(s, '2031-03-31T23:59:59.999Z', 'b-last-instant-of-march'),
        row(s, '2031-04-15T08:00:00Z', 'c-april'),
        row(s, '2031-09-01T00:00:00Z', 'd-future-beyond-partitions'),
        row(s, '1999-12-31T23:00:00Z', 'e-far-past'),
      ]);
      expect(await partitionOf(db)).toEqual([
        { tool_name: 'a-first-instant-of-march', part: 'telemetry_p2031_03' },
        { tool_name: 'b-last-instant-of-march', part: 'telemetry_p2031_03' },
        { tool_name: 'c-april', part: 'telemetry_p2031_04' },
        { tool_name: 'd-future-beyond-partitions', part: 'telemetry_default' },
        { tool_name: 'e-far-past', part: 'telemetry_default' },
      ]);

      // When September comes within reach, its rows move out of the default partition; the
      // 1999 row is long expired and is deleted from the default partition instead.
      const later = d('2031-07-02T00:00:00Z');
      const next = await retention.maintain(later);
      expect(next.created).toEqual(['telemetry_p2031_07', 'telemetry_p2031_08', 'telemetry_p2031_09']); // a past month without rows gets none
      expect(next.deletedDefaultRows).toBe(1);
      const parts = new Map((await partitionOf(db)).map((r) => [r.tool_name, r.part]));
      expect(parts.get('d-future-beyond-partitions')).toBe('telemetry_p2031_09');
      expect(parts.has('e-far-past')).toBe(false);
      expect(await db.query('SELECT * FROM telemetry_default')).toEqual([]);
    } finally {
      await retention.close();
    }
  });

  it('retention drops whole expired partitions with a fixed clock, and scores stay exactly the same', async () => {
    tdb = await createTestDatabase();
    const { db } = tdb;
    const at = d('2027-06-15T10:00:00Z');
    const retention = createTelemetryRetention({ db, config: loadConfig({ TELEMETRY_RETENTION_DAYS: '400' }), now: () => at }, { runAtStartup: false });
    try {
      const parts = telemetryPartitionStore(db);
      for (const m of ['2026-01-01', '2026-05-01', '2027-06-01']) await parts.create(partitionFor(d(`${m}T00:00:00Z`)));
      const s = await server(db);
      const rows: IngestRow[] = [];
      for (let i = 0; i < 40; i++) rows.push(row(s, `2026-01-${String(1 + (i % 28)).padStart(2, '0')}T10:00:00Z`, i % 5 === 0 ? `jan-${i}-fail` : `jan-${i}`, `src:${i % 4}`));
      for (let i = 0; i < 30; i++) rows.push(row(s, `2026-05-${String(1 + (i % 28)).padStart(2, '0')}T10:00:00Z`, `may-${i}`, `src:${i % 3}`));
      for (let i = 0; i < 20; i++) rows.push(row(s, `2027-06-${String(1 + (i % 14)).padStart(2, '0')}T10:00:00Z`, i % 4 === 0 ? `jun-${i}-fail` : `jun-${i}`, `src:${i % 2}`));
      await telemetryStore(db).insertMany(rows);

      const before = (await createTrustEngine(db).compute([s], at)).get(s.id)!;
      const run = await retention.maintain(at);
      // cutoff 2026-05-11: January is entirely older and goes; May straddles the cutoff and stays whole.
      expect(run.dropped).toEqual(['telemetry_p2026_01']);
      expect(names(await parts.list())).not.toContain('telemetry_p2026_01');
      const [left] = await db.query<{ jan: number; may: number; jun: number }>(
        `SELECT count(*) FILTER (WHERE tool_name LIKE 'jan-%')::int8 AS jan, count(*) FILTER (WHERE tool_name LIKE 'may-%')::int8 AS may,
                count(*) FILTER (WHERE tool_name LIKE 'jun-%')::int8 AS jun FROM telemetry`,
      );
      expect(left).toEqual({ jan: 0, may: 30, jun: 20 });

      // A fresh engine (no cache) computes the same score from the rollups as before the drop.
      const after = (await createTrustEngine(db).compute([s], at)).get(s.id)!;
      expect(after.trust_score).toBe(before.trust_score);
      expect(after.verdict).toBe(before.verdict);
      expect(after.totals).toEqual(before.totals);
      expect(after.breakdown).toEqual(before.breakdown);
    } finally {
      await retention.close();
    }
  });

  // PostgreSQL only: PGlite runs one statement at a time, so nothing can race there.
  it.skipIf(backend !== 'postgres')('inserts racing the creation of their month\'s partition are all stored, in that partition', async () => {
    tdb = await createTestDatabase();
    const { db } = tdb;
    const s = await server(db);
    const month = partitionFor(d('2033-05-01T00:00:00Z'));
    const telemetry = telemetryStore(db);
    // Concurrent single-report batches into a month without a partition (they start in the
    // default partition) while the partition job gives that month its own partition.
    const writes = Array.from({ length: 40 }, (_, i) =>
      new Promise((r) => setTimeout(r, i * 3)).then(() => telemetry.insertMany([row(s, `2033-05-10T10:00:${String(i).padStart(2, '0')}Z`, `race-${i}`)])),
    );
    const created = new Promise((r) => setTimeout(r, 30)).then(() => telemetryPartitionStore(db).create(month));
    await Promise.all([...writes, created]);
    const rows = await partitionOf(db);
    expect(rows).toHaveLength(40);
    expect(new Set(rows.map((r) => r.part))).toEqual(new Set([month.name]));
  });

  it('the service runs the job at start-up (once per period across instances) with its clock', async () => {
    tdb = await createTestDatabase();
    const at = d('2032-02-20T00:00:00Z');
    const app = await startTestApp({}, { tdb, now: () => at });
    try {
      await app.obs.services.telemetryRetention.ready();
      const months = names(await telemetryPartitionStore(tdb.db).list());
      expect(months).toEqual(expect.arrayContaining(['telemetry_p2032_02', 'telemetry_p2032_03', 'telemetry_p2032_04']));
      // This period was claimed at start-up: another tick in it (here or on another instance) skips.
      expect(await app.obs.services.telemetryRetention.job.tick(at)).toBe(false);
    } finally {
      await app.close();
      tdb = null; // closed with the app
    }
  });
});
