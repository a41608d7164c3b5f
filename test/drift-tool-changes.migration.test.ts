// Migration 1590 on an existing database: the per-tool drift index (drift_tool_changes) is filled
// from the drift baselines recorded before it existed (each current tool's newest drift), so the
// gate keeps denying a tool that drifted before the upgrade. The database is built with the migrations before 1590, given drift
// baselines the way the old code stored them, then migrated.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { driftStore } from '../src/store/drift.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

const MIGRATIONS = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'db', 'migrations');
const T0 = new Date('2026-06-01T00:00:00Z');
let dir: string;
let tdb: TestDatabase;
let serverId: number;

async function baseline(id: string, at: Date, drift: boolean, changes: unknown, tools: string[]) {
  const hashes = tools.map((name) => ({ name, hash: 'h', description: 'h', input_schema: 'h', output_schema: 'h', annotations: 'h' }));
  await tdb.db.query(
    `INSERT INTO drift_baselines (baseline_id, server_id, recorded_at, manifest_hash, tool_count, tools, previous_baseline_id, drift_detected, changes, receipt_id)
     VALUES ($1, $2, $3, 'h', $6, $7, NULL, $4, $5, $1)`,
    [id, serverId, at, drift, JSON.stringify(changes), tools.length, JSON.stringify(hashes)],
  );
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'obs-migr-'));
  for (const f of readdirSync(MIGRATIONS)) if (f < '1590') copyFileSync(join(MIGRATIONS, f), join(dir, f));
  tdb = await createTestDatabase({ migrationsDir: dir });
  const [row] = await tdb.db.query<{ id: number }>(
    "INSERT INTO servers (url, name, slug, category, registered_at) VALUES ('https://drifty.example/mcp', 'drifty', 'drifty', 'weather', $1) RETURNING id",
    [T0],
  );
  serverId = Number(row!.id);
  await baseline('b1', T0, false, { added: [], removed: [], changed: [] }, ['get_radar', 'gone', 'dropped_later']);
  await baseline('b2', new Date(T0.getTime() + 1000), true, { added: ['new_tool'], removed: ['gone'], changed: [{ name: 'get_radar', changes: ['description', 'input_schema'] }, { name: 'dropped_later', changes: ['description'] }] }, ['dropped_later', 'get_radar', 'new_tool']);
  // Two drifts at the same instant: the one recorded last is the newest. dropped_later goes.
  await baseline('b3', new Date(T0.getTime() + 2000), true, { added: [], removed: ['dropped_later'], changed: [{ name: 'get_radar', changes: ['annotations'] }] }, ['get_radar', 'new_tool']);
  await baseline('b4', new Date(T0.getTime() + 2000), true, { added: [], removed: [], changed: [{ name: 'get_radar', changes: ['output_schema'] }] }, ['get_radar', 'new_tool']);
  await migrate(tdb.db);
}, 120_000);
afterAll(async () => {
  await tdb?.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe(`migration 1590: per-tool drift index from earlier baselines (${backend})`, () => {
  it('holds each current tool\'s newest earlier drift, and none for a tool a later drift removed', async () => {
    const rows = await tdb.db.query<{ tool_name: string; baseline_id: string; change: string; parts: string[] }>(
      'SELECT tool_name, baseline_id, change, parts FROM drift_tool_changes ORDER BY tool_name',
    );
    expect(rows).toEqual([
      { tool_name: 'get_radar', baseline_id: 'b4', change: 'changed', parts: ['output_schema'] },
      { tool_name: 'new_tool', baseline_id: 'b2', change: 'added', parts: [] },
    ]);
    const store = driftStore(tdb.db);
    expect(await store.toolDriftSince(serverId, 'get_radar', T0)).toMatchObject({ change: 'changed', parts: ['output_schema'] });
    expect(await store.toolDriftSince(serverId, 'new_tool', T0)).toMatchObject({ change: 'added', recorded_at: new Date(T0.getTime() + 1000) });
    expect(await store.toolDriftSince(serverId, 'new_tool', new Date(T0.getTime() + 1001))).toBeNull();
    expect(await store.toolDriftSince(serverId, 'gone', T0)).toBeNull();
    expect(await store.toolDriftSince(serverId, 'dropped_later', T0)).toBeNull();
    // Migration 1620 counts the lists of earlier baselines into columns (what the compliance export reads).
    const counts = await tdb.db.query('SELECT baseline_id, tools_added, tools_removed, tools_changed FROM drift_baselines ORDER BY baseline_id');
    expect(counts).toEqual([
      { baseline_id: 'b1', tools_added: 0, tools_removed: 0, tools_changed: 0 },
      { baseline_id: 'b2', tools_added: 1, tools_removed: 1, tools_changed: 2 },
      { baseline_id: 'b3', tools_added: 0, tools_removed: 1, tools_changed: 1 },
      { baseline_id: 'b4', tools_added: 0, tools_removed: 0, tools_changed: 1 },
    ]);
  });
});
