// Security audit finding (look-alike URLs), existing databases: servers stored under a spelling
// the canonical form now folds (a host's trailing dot, percent-encoding per RFC 3986 6.2.2) are
// brought to the canonical URL by migration 1650: renamed in place when it is free, else merged
// into the server that has it (evidence, rollups and rows of other tables move per source;
// the server kept is the one at the canonical URL unless only the other is catalogued). Before
// the migration, a look-up of `https://alpha.example/mcp` answered the impostor stored as
// `https://alpha.example./mcp` under its slug, and reports for either spelling went to two servers.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { canonicalServerUrl } from '../src/domain/server-identity.js';
import { emptyHistogram } from '../src/domain/latency-histogram.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
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
     VALUES ($1, $2, $3, 'general', $4, $5::text, CASE WHEN $5::text IS NULL THEN NULL ELSE 'streamable-http' END, CASE WHEN $5::text IS NULL THEN NULL ELSE $4::timestamptz END) RETURNING id`,
    [url, name, slug, registeredAt, registry ?? null],
  );
  ids[key] = row!.id;
  if (registry) await tdb.db.query("INSERT INTO server_handles (handle, server_id, kind) VALUES ($1, $2, 'registry') ON CONFLICT (handle) DO UPDATE SET kind = 'registry'", [slug, row!.id]);
}

/** `n` reports from `source` at `when` with every rollup, `ok` successes. */
async function evidence(key: string, source: string, n: number, ok: boolean, when: Date, tool = 'forecast') {
  const id = ids[key]!;
  const hist = emptyHistogram();
  hist[3] = n;
  const s = ok ? n : 0;
  for (let i = 0; i < n; i++) await tdb.db.query('INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, source) VALUES ($1, $2, $3, 40, $4, $5)', [id, when, ok, tool, source]);
  await tdb.db.query(
    `INSERT INTO server_totals AS t (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at) VALUES ($1, $2::int8, $3::int8, $2::int8 * 40, 0, $4, $5, $5)
     ON CONFLICT (server_id) DO UPDATE SET n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum`,
    [id, n, s, hist, when],
  );
  await tdb.db.query('INSERT INTO telemetry_hourly (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist) VALUES ($1, $2, $3, $4::int8, $5::int8, $4::int8 * 40, 0, $6)', [id, when, source, n, s, hist]);
  await tdb.db.query('INSERT INTO trust_evidence (server_id, source, weight, successes, latency_sum, reports, updated_at) VALUES ($1, $2, $3::int8, $4::int8, $3::int8 * 40, $3::int8, $5)', [id, source, n, s, when]);
  await tdb.db.query('INSERT INTO tool_evidence (server_id, tool_name, source, weight, successes, latency_sum, reports, updated_at) VALUES ($1, $2, $3, $4::int8, $5::int8, $4::int8 * 40, $4::int8, $6)', [id, tool, source, n, s, when]);
  await tdb.db.query('INSERT INTO observation_schedule (server_id, next_due_at) VALUES ($1, $2) ON CONFLICT DO NOTHING', [id, when]);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'obs-migr-1650-'));
  for (const f of readdirSync(MIGRATIONS)) if (f < '1650') copyFileSync(join(MIGRATIONS, f), join(dir, f));
  tdb = await createTestDatabase({ migrationsDir: dir });
  // The audit: an impostor under a trailing-dot spelling, first, holding the natural name and slug...
  await server('dot', 'https://alpha.example./mcp', 'alpha.example./mcp', 'alpha-example-mcp', at(0));
  // ...and the real server, suffixed; then a second spelling by percent-encoding.
  await server('real', 'https://alpha.example/mcp', 'alpha.example/mcp (2)', 'alpha-example-mcp-2', at(1));
  await server('pct', 'https://alpha.example/%6dcp', 'alpha.example/%6dcp', 'alpha-example-6dcp', at(2));
  // A spelling whose canonical URL nobody has: renamed in place.
  await server('alone', 'https://beta.example./%7Etools/mcp', 'beta.example./%7Etools/mcp', 'beta-example-7etools-mcp', at(3));
  // A catalogue server under a legacy spelling, and a reported server at its canonical URL: the catalogue server is kept.
  await server('catOld', 'https://gamma.example/sse?tenant=%61cme', 'io.github.gamma/sse', 'io-github-gamma-sse', at(0), 'io.github.gamma/sse');
  await server('catDup', 'https://gamma.example/sse?tenant=acme', 'gamma.example/sse', 'gamma-example-sse', at(4));
  // Refused by the new form (empty label): left as it is.
  await server('odd', 'https://a..example/mcp', 'a..example/mcp', 'a-example-mcp', at(5));
  await evidence('dot', 'addr:attacker', 15, true, at(10));
  await evidence('pct', 'addr:attacker', 5, true, at(11));
  for (const s of ['addr:h1', 'addr:h2', 'addr:h3']) await evidence('real', s, 4, false, at(12));
  await evidence('alone', 'addr:h1', 2, true, at(12));
  await evidence('catDup', 'addr:h2', 3, true, at(12));
  await migrate(tdb.db);
  const appDb = backend === 'postgres' ? { db: openPostgres(tdb.url!), url: tdb.url, drop: async () => {} } : tdb;
  t = await startTestApp({ RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0', TRUST_PROXY: '1' }, { tdb: appDb, now: () => at(24) });
}, 180_000);
afterAll(async () => {
  await t?.close();
  await tdb?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const byId = async (key: string) => (await tdb.db.query<{ url: string; name: string; slug: string }>('SELECT url, name, slug FROM servers WHERE id = $1', [ids[key]]))[0] ?? null;
const preflight = (target: string) => json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`));

describe(`migration 1650 on an existing database (${backend})`, () => {
  it('every stored URL is in the canonical form the code computes; spellings of one URL were merged into the server at it', async () => {
    const urls = (await tdb.db.query<{ url: string }>('SELECT url FROM servers ORDER BY id')).map((r) => r.url);
    for (const u of urls.filter((x) => !x.includes('..'))) expect(canonicalServerUrl(u), u).toBe(u);
    expect(urls.sort()).toEqual(['https://a..example/mcp', 'https://alpha.example/mcp', 'https://beta.example/~tools/mcp', 'https://gamma.example/sse?tenant=acme'].sort());
    expect(await byId('real')).toEqual({ url: 'https://alpha.example/mcp', name: 'alpha.example/mcp (2)', slug: 'alpha-example-mcp-2' });
    expect(await byId('dot')).toBeNull();
    expect(await byId('pct')).toBeNull();
    expect(await byId('alone')).toMatchObject({ url: 'https://beta.example/~tools/mcp', slug: 'beta-example-7etools-mcp' });
    expect(await byId('catOld')).toEqual({ url: 'https://gamma.example/sse?tenant=acme', name: 'io.github.gamma/sse', slug: 'io-github-gamma-sse' });
    expect(await byId('catDup')).toBeNull();
    // The merged servers' slug handles are released; a registry binding stays with its server.
    const handles = await tdb.db.query<{ handle: string; server_id: number }>('SELECT handle, server_id FROM server_handles ORDER BY handle');
    expect(handles.map((h) => h.handle)).not.toContain('alpha-example-mcp');
    expect(handles.find((h) => h.handle === 'io-github-gamma-sse')?.server_id).toBe(ids.catOld);
  });

  it('evidence, rollups, raw reports and per-tool evidence moved to the kept server, per source', async () => {
    const id = ids.real!;
    const ev = await tdb.db.query<{ source: string; reports: number }>('SELECT source, reports::int AS reports FROM trust_evidence WHERE server_id = $1 ORDER BY source', [id]);
    expect(ev).toEqual([
      { source: 'addr:attacker', reports: 20 },
      { source: 'addr:h1', reports: 4 },
      { source: 'addr:h2', reports: 4 },
      { source: 'addr:h3', reports: 4 },
    ]);
    const [tot] = await tdb.db.query<{ n: number; raw: number; hourly: number; tool: number }>(
      `SELECT (SELECT n::int FROM server_totals WHERE server_id = $1) AS n, (SELECT count(*)::int FROM telemetry WHERE server_id = $1) AS raw,
              (SELECT sum(n)::int FROM telemetry_hourly WHERE server_id = $1) AS hourly, (SELECT sum(reports)::int FROM tool_evidence WHERE server_id = $1) AS tool`,
      [id],
    );
    expect(tot).toEqual({ n: 32, raw: 32, hourly: 32, tool: 32 });
    const catalogue = await tdb.db.query<{ n: number }>('SELECT n::int FROM server_totals WHERE server_id = $1', [ids.catOld]);
    expect(catalogue).toEqual([{ n: 3 }]);
    const orphans = await tdb.db.query('SELECT server_id FROM observation_schedule WHERE server_id NOT IN (SELECT id FROM servers)');
    expect(orphans).toEqual([]);
  });

  it('every spelling, the name and the freed slug answer for the real server over HTTP; new reports of a spelling count for it', async () => {
    for (const target of ['https://alpha.example/mcp', 'https://alpha.example./mcp', 'https://alpha.example/%6dcp', 'alpha.example/mcp', 'alpha-example-mcp', 'alpha-example-mcp-2']) {
      expect((await preflight(target)).server_url, target).toBe('https://alpha.example/mcp');
    }
    for (const target of ['https://beta.example./%7etools/mcp', 'beta.example/~tools/mcp']) expect((await preflight(target)).server_url, target).toBe('https://beta.example/~tools/mcp');
    expect((await preflight('https://gamma.example/sse?tenant=%61cme')).server_url).toBe('https://gamma.example/sse?tenant=acme');
    const r = await postJson(`${t.base}/api/report`, { server_url: 'https://alpha.example./mcp', success: false, latency_ms: 900 }, { 'x-forwarded-for': '203.0.113.50' });
    expect((await json(r)).server_url).toBe('https://alpha.example/mcp');
    expect((await tdb.db.query('SELECT id FROM servers WHERE url LIKE $1', ['https://alpha.example%'])).length).toBe(1);
  });
});
