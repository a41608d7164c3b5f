// Issue 17 findings 5 and 9 on an existing database: migration 1410 merges the servers reports
// created with a query string into their query-less server (no query from a report stays stored)
// and de-duplicates names and slugs deterministically before the unique constraints and the
// handle namespace exist. The database is built with the migrations before 1410, filled the way
// the old code filled it (takeover rows, duplicate slugs, one server per query), then migrated.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { emptyHistogram } from '../src/domain/latency-histogram.js';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

const MIGRATIONS = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'db', 'migrations');
const T0 = new Date('2026-06-01T00:00:00Z');
const at = (h: number) => new Date(T0.getTime() + h * 3_600_000);
let dir: string;
let tdb: TestDatabase;
let t: TestApp;
const ids: Record<string, number> = {};

async function server(key: string, url: string, name: string, slug: string, registeredAt: Date, registry?: string) {
  const [row] = await tdb.db.query<{ id: number }>(
    `INSERT INTO servers (url, name, slug, category, registered_at, registry_name, transport, catalogued_at)
     VALUES ($1, $2, $3, 'weather', $4, $5::text, CASE WHEN $5::text IS NULL THEN NULL ELSE 'streamable-http' END, CASE WHEN $5::text IS NULL THEN NULL ELSE $4::timestamptz END) RETURNING id`,
    [url, name, slug, registeredAt, registry ?? null],
  );
  ids[key] = row!.id;
}

/** `n` reports (all successes) from `source` at `when`, with every rollup the old ingestion kept. */
async function evidence(key: string, source: string, n: number, when: Date) {
  const id = ids[key]!;
  const hist = emptyHistogram();
  hist[3] = n;
  for (let i = 0; i < n; i++) await tdb.db.query('INSERT INTO telemetry (server_id, received_at, success, latency_ms) VALUES ($1, $2, true, 40)', [id, when]);
  await tdb.db.query(
    `INSERT INTO server_totals AS t (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at) VALUES ($1, $2::int8, $2::int8, $2::int8 * 40, 0, $3, $4, $4)
     ON CONFLICT (server_id) DO UPDATE SET n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum`,
    [id, n, hist, when],
  );
  await tdb.db.query('INSERT INTO telemetry_hourly (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist) VALUES ($1, $2, $3, $4::int8, $4::int8, $4::int8 * 40, 0, $5)', [id, when, source, n, hist]);
  await tdb.db.query('INSERT INTO trust_evidence (server_id, source, weight, successes, latency_sum, reports, updated_at) VALUES ($1, $2, $3::int8, $3::int8, $3::int8 * 40, $3::int8, $4)', [id, source, n, when]);
  await tdb.db.query('INSERT INTO observation_schedule (server_id, next_due_at) VALUES ($1, $2) ON CONFLICT DO NOTHING', [id, when]);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'obs-migr-'));
  for (const f of readdirSync(MIGRATIONS)) if (f < '1410') copyFileSync(join(MIGRATIONS, f), join(dir, f));
  tdb = await createTestDatabase({ migrationsDir: dir });
  // A catalogue server with two remotes (same name and slug, as the old import stored them)...
  await server('cat', 'https://weather.acme.example/mcp', 'io.github.acme/weather', 'io-github-acme-weather', at(0), 'io.github.acme/weather');
  await server('catSse', 'https://weather.acme.example/sse', 'io.github.acme/weather', 'io-github-acme-weather', at(0), 'io.github.acme/weather');
  // ...taken over by reports: an exact name and an exact slug.
  await server('byName', 'https://io.github.acme/weather', 'io.github.acme/weather', 'io-github-acme-weather', at(1));
  await server('bySlug', 'https://io-github-acme-weather', 'io-github-acme-weather', 'io-github-acme-weather', at(2));
  // A pre-import squatter: reported before the catalogue server it collides with was imported.
  await server('squat', 'https://io.github.late/tool', 'io.github.late/tool', 'io-github-late-tool', at(0));
  await server('late', 'https://tool.late.example/mcp', 'io.github.late/tool', 'io-github-late-tool', at(5), 'io.github.late/tool');
  // Two servers of reports whose names slugify alike; the older keeps the slug.
  await server('alpha', 'https://alpha.example/mcp', 'alpha.example/mcp', 'alpha-example-mcp', at(3));
  await server('alpha2', 'https://alpha-example-mcp', 'alpha-example-mcp', 'alpha-example-mcp', at(4));
  // One server per query string: q.example has no query-less row (renamed in place, then merged);
  // r.example has one (merged into it). A catalogue URL with a query stays as it is.
  await server('q1', 'https://q.example/mcp?token=secret-1', 'q.example/mcp', 'q-example-mcp', at(6));
  await server('q2', 'https://q.example/mcp?token=secret-2', 'q.example/mcp', 'q-example-mcp', at(7));
  await server('r', 'https://r.example/mcp', 'r.example/mcp', 'r-example-mcp', at(6));
  await server('r1', 'https://r.example/mcp?api_key=secret-3', 'r.example/mcp', 'r-example-mcp', at(8));
  // Tracked through reports before its import: its slug is its own, its registry name a second handle.
  await server('pre', 'https://pre.example/mcp', 'pre.example/mcp', 'pre-example-mcp', at(0), 'io.github.pre/tool');
  await server('tenant', 'https://t.example/mcp?tenant=acme', 'io.github.t/tenant', 'io-github-t-tenant', at(0), 'io.github.t/tenant');
  await evidence('q1', 'addr:aaa', 4, at(10));
  await evidence('q2', 'addr:aaa', 6, at(20));
  await evidence('q2', 'addr:bbb', 2, at(20));
  await evidence('r', 'addr:ccc', 3, at(10));
  await evidence('r1', 'addr:ccc', 5, at(10));
  await evidence('cat', 'addr:ddd', 2, at(10));
  await migrate(tdb.db);
  // The service closes the database it is given; on PostgreSQL it gets a pool of its own.
  const appDb = backend === 'postgres' ? { db: openPostgres(tdb.url!), url: tdb.url, drop: async () => {} } : tdb;
  t = await startTestApp({ RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' }, { tdb: appDb, now: () => at(24) });
}, 180_000);
afterAll(async () => {
  await t?.close();
  await tdb?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const byId = async (key: string) => (await tdb.db.query<{ url: string; name: string; slug: string }>('SELECT url, name, slug FROM servers WHERE id = $1', [ids[key]]))[0];
const preflightUrl = async (target: string) => (await json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`))).server_url as string | null;

describe(`migration 1410 on an existing database (${backend})`, () => {
  it('names and slugs are de-duplicated deterministically: registry names first, then the oldest', async () => {
    expect(await byId('cat')).toEqual({ url: 'https://weather.acme.example/mcp', name: 'io.github.acme/weather', slug: 'io-github-acme-weather' });
    expect(await byId('catSse')).toMatchObject({ name: 'io.github.acme/weather (2)', slug: 'io-github-acme-weather-2' });
    expect(await byId('byName')).toMatchObject({ name: 'io.github.acme/weather (3)', slug: 'io-github-acme-weather-3' });
    expect(await byId('bySlug')).toMatchObject({ name: 'io-github-acme-weather (4)', slug: 'io-github-acme-weather-4' });
    expect(await byId('late')).toMatchObject({ name: 'io.github.late/tool', slug: 'io-github-late-tool' });
    expect(await byId('squat')).toMatchObject({ name: 'io.github.late/tool (2)', slug: 'io-github-late-tool-2' });
    expect(await byId('alpha')).toMatchObject({ name: 'alpha.example/mcp', slug: 'alpha-example-mcp' });
    expect(await byId('alpha2')).toMatchObject({ name: 'alpha-example-mcp (2)', slug: 'alpha-example-mcp-2' });
    const dupes = await tdb.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM (SELECT slug FROM servers GROUP BY slug HAVING count(*) > 1 UNION ALL SELECT lower(name) FROM servers GROUP BY lower(name) HAVING count(*) > 1) d',
    );
    expect(dupes[0]!.n).toBe(0);
    // Every server's slug is a handle of its own.
    const unbound = await tdb.db.query('SELECT s.id FROM servers s LEFT JOIN server_handles h ON h.handle = s.slug AND h.server_id = s.id WHERE h.handle IS NULL');
    expect(unbound).toEqual([]);
  });

  it('every identifier resolves to the catalogue server it names, over HTTP', async () => {
    for (const target of ['io.github.acme/weather', 'io-github-acme-weather']) expect(await preflightUrl(target)).toBe('https://weather.acme.example/mcp');
    for (const target of ['io.github.late/tool', 'io-github-late-tool']) expect(await preflightUrl(target)).toBe('https://tool.late.example/mcp');
    expect(await preflightUrl('alpha-example-mcp')).toBe('https://alpha.example/mcp');
    expect(await preflightUrl('io-github-acme-weather-4')).toBe('https://io-github-acme-weather');
    for (const target of ['io.github.pre/tool', 'pre-example-mcp', 'pre.example/mcp']) expect(await preflightUrl(target)).toBe('https://pre.example/mcp');
  });

  it('servers reports created with a query became their query-less server; every report is kept, no query is stored', async () => {
    const urls = (await tdb.db.query<{ url: string }>('SELECT url FROM servers ORDER BY url')).map((r) => r.url);
    expect(urls.filter((u) => u.includes('?'))).toEqual(['https://t.example/mcp?tenant=acme']);
    expect(urls).toContain('https://q.example/mcp');
    expect(JSON.stringify(await tdb.db.query('SELECT * FROM servers'))).not.toContain('secret-');
    const q = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://q.example/mcp?token=anything')}`));
    expect(q.server.url).toBe('https://q.example/mcp');
    expect(q.metrics.total_interactions).toBe(12);
    const r = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://r.example/mcp')}`));
    expect(r.metrics.total_interactions).toBe(8);
    // Rollups and evidence were merged per source: one row per (server, source).
    const ev = await tdb.db.query<{ source: string; reports: number }>(
      "SELECT source, reports FROM trust_evidence WHERE server_id = (SELECT id FROM servers WHERE url = 'https://q.example/mcp') ORDER BY source",
    );
    expect(ev).toEqual([
      { source: 'addr:aaa', reports: 10 },
      { source: 'addr:bbb', reports: 2 },
    ]);
    const hourly = await tdb.db.query<{ n: number }>("SELECT sum(n)::int AS n FROM telemetry_hourly WHERE server_id = (SELECT id FROM servers WHERE url = 'https://r.example/mcp')");
    expect(hourly[0]!.n).toBe(8);
    expect((await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://t.example/mcp?tenant=acme')}`))).server.name).toBe('io.github.t/tenant');
  });

  it('the database refuses duplicates from now on, whatever writes them', async () => {
    await expect(tdb.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://dup.example', 'dup', 'alpha-example-mcp', 'general')")).rejects.toThrow();
    await expect(tdb.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://dup.example', 'ALPHA.example/MCP', 'fresh', 'general')")).rejects.toThrow();
    // A registry name's handle is reserved even where no server has it as its slug.
    await expect(tdb.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://dup.example', 'x', 'io-github-pre-tool', 'general')")).rejects.toThrow();
    await tdb.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://dup.example', 'x', 'fresh-x', 'general')");
  });
});
