// Migration 1630 on an existing database: the per-target demand sums gain per-kind columns
// (gateway decisions, agent queries) and hourly sums, filled from the demand rows recorded before, and receipts
// are counted as they are stored, starting from those stored before; so /api/stats' market
// figures, which now read the sums and the count instead of every demand row and receipt, count
// what was there.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { insertDemandStatement, type DemandRow } from '../src/store/demand.js';
import { marketStore } from '../src/store/market.js';
import { insertReceiptsStatement, receiptStore, type ReceiptRow } from '../src/store/receipts.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

const MIGRATIONS = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'db', 'migrations');
const T0 = new Date('2026-06-01T00:00:00Z');
let dir: string;
let tdb: TestDatabase;

const row = (target: string, kind: string, checks: number, server_url: string | null = target): DemandRow => ({
  checked_at: T0,
  target,
  server_url,
  name: null,
  verdict: 'UNRATED',
  kind,
  receipt_id: null,
  checks,
});

const receipt = (id: string, issued_at = T0): ReceiptRow => ({ receipt_id: id, kind: 'preflight', sub: 'https://up.example/mcp', issued_at, kid: 'k', claim: { verdict: 'UNRATED' }, jws: 'x.y.z' });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'obs-migr-'));
  for (const f of readdirSync(MIGRATIONS)) if (f < '1630') copyFileSync(join(MIGRATIONS, f), join(dir, f));
  tdb = await createTestDatabase({ migrationsDir: dir });
  await tdb.db.query("INSERT INTO servers (url, name, slug, category, registered_at) VALUES ('https://tracked.example/mcp', 'tracked', 'tracked', 'weather', $1)", [T0]);
  // Two statements, as two writes of the old code: the trigger adds each to the sums.
  await tdb.db.query(...insertDemandStatement([row('https://tracked.example/mcp', 'preflight', 3), row('https://tracked.example/mcp', 'gateway', 5), row('a name', 'preflight', 1, null)]));
  await tdb.db.query(...insertDemandStatement([row('https://up.example/mcp', 'gateway', 7), row('https://up.example/mcp', 'agent_query', 2), row('a name', 'agent_query', 4, null)]));
  await tdb.db.query(...insertReceiptsStatement([receipt('r1'), receipt('r2'), receipt('r3')]));
  await migrate(tdb.db);
}, 120_000);
afterAll(async () => {
  await tdb?.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe(`migration 1630: per-kind demand sums from earlier rows (${backend})`, () => {
  it('fills gateway and agent_query per target from the rows, and the market figures count them', async () => {
    const sums = await tdb.db.query<{ target: string; checks: number; gateway: number; agent_query: number }>(
      'SELECT target, sum(checks)::int8 AS checks, sum(gateway)::int8 AS gateway, sum(agent_query)::int8 AS agent_query FROM preflight_demand_targets GROUP BY target ORDER BY target',
    );
    expect(sums.map((s) => [s.target, Number(s.checks), Number(s.gateway), Number(s.agent_query)])).toEqual([
      ['a name', 5, 0, 4],
      ['https://tracked.example/mcp', 8, 5, 0],
      ['https://up.example/mcp', 9, 7, 2],
    ]);
    // The hourly sums the windows read, from the same rows (all in T0's hour).
    const hourly = await tdb.db.query<{ bucket: Date; target: string; checks: number }>(
      'SELECT bucket, target, sum(checks)::int8 AS checks FROM preflight_demand_hourly GROUP BY 1, 2 ORDER BY 2',
    );
    expect(hourly.map((h) => [h.bucket.toISOString(), h.target, Number(h.checks)])).toEqual([
      [T0.toISOString(), 'a name', 5],
      [T0.toISOString(), 'https://tracked.example/mcp', 8],
      [T0.toISOString(), 'https://up.example/mcp', 9],
    ]);
    expect(await marketStore(tdb.db).figures(new Date(T0.getTime() - 1000))).toMatchObject({
      preflight_checks_total: 22,
      preflight_checks_last_24h: 22,
      unique_preflight_targets: 3,
      tracked_servers_vetted: 1,
      gateway_decisions: 12,
      agent_queries_served: 6,
    });
    // Rows written after the migration are counted per kind by the trigger.
    await tdb.db.query(...insertDemandStatement([row('https://up.example/mcp', 'gateway', 1)]));
    expect(await marketStore(tdb.db).figures(new Date(T0.getTime() - 1000))).toMatchObject({ preflight_checks_total: 23, gateway_decisions: 13 });
  });

  it('counts the receipts stored before, those stored after, and keeps counting those a retention deleted', async () => {
    const issued = async () => (await marketStore(tdb.db).figures(T0)).receipts_issued;
    expect(await issued()).toBe(3);
    await tdb.db.query(...insertReceiptsStatement([receipt('r4'), receipt('r5')]));
    await receiptStore(tdb.db).insert(receipt('r6', new Date(T0.getTime() + 86_400_000)));
    expect(await issued()).toBe(6);
    expect(await receiptStore(tdb.db).deleteIssuedBefore(new Date(T0.getTime() + 1000), 100)).toBe(5);
    expect(await issued()).toBe(6);
  });
});
