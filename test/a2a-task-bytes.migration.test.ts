// Migration 1640 on an existing database: tasks stored before it get their size (the bytes a
// ListTasks page is cut by, test/a2a-answer-bounds.test.ts), and pages over them work. The
// database is built with the migrations before 1640, given tasks the way the old code stored
// them, then migrated.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { a2aTaskStore } from '../src/store/a2a-tasks.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

const MIGRATIONS = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'db', 'migrations');
let dir: string;
let tdb: TestDatabase;

const task = (id: string, at: string, pad: number) => ({ id, contextId: 'ctx', kind: 'task', status: { state: 'completed', timestamp: at }, history: [{ kind: 'message', role: 'user', messageId: `${id}-m`, parts: [{ kind: 'text', text: 'x'.repeat(pad) }] }] });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'obs-migr-'));
  for (const f of readdirSync(MIGRATIONS)) if (f < '1640') copyFileSync(join(MIGRATIONS, f), join(dir, f));
  tdb = await createTestDatabase({ migrationsDir: dir });
  for (const [id, at, pad] of [['t1', '2026-11-01T00:00:01.000Z', 10], ['t2', '2026-11-01T00:00:02.000Z', 5000]] as const) {
    await tdb.db.query('INSERT INTO a2a_tasks (id, context_id, state, created_at, updated_at, task) VALUES ($1, $2, $3, $4, $4, $5)', [id, 'ctx', 'completed', new Date(at), JSON.stringify(task(id, at, pad))]);
  }
  await migrate(tdb.db);
}, 120_000);
afterAll(async () => {
  await tdb?.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe(`migration 1640: the size of tasks stored before it (${backend})`, () => {
  it('sets each task\'s bytes to its JSON size, and pages are cut by it', async () => {
    const rows = await tdb.db.query<{ id: string; bytes: number }>('SELECT id, bytes FROM a2a_tasks ORDER BY id');
    expect(rows.map((r) => r.id)).toEqual(['t1', 't2']);
    for (const r of rows) expect(r.bytes).toBeGreaterThan(r.id === 't2' ? 5000 : 10);
    const store = a2aTaskStore(tdb.db);
    // Newest first: t2 (5 KB) always; t1 only when both fit.
    expect((await store.list({ contextId: 'ctx' }, null, 10, 1000)).tasks.map((t) => t.task.id)).toEqual(['t2']);
    expect((await store.list({ contextId: 'ctx' }, null, 10, 1000)).more).toBe(true);
    expect((await store.list({ contextId: 'ctx' }, null, 10, 100_000)).tasks.map((t) => t.task.id)).toEqual(['t2', 't1']);
    expect((await store.list({ contextId: 'ctx' }, null, 10, 100_000)).more).toBe(false);
  });
});
