// Issue 17 finding 5: nobody can take over a server's name or slug. A catalogue server
// (io.github.acme/weather at https://weather.acme.example/mcp) is attacked with reports for
// servers whose derived names equal its registry name (`https://io.github.acme/weather`) or its
// slug (`https://io-github-acme-weather`). Before the fix an exact name match beat the registry
// name and the slug, so pre-flight, /benchmark, /agent-query (paid, signed) and the /monitor
// links answered for the attacker's server. Resolution order (docs/scoring.md "Server identity"):
// canonical URL, then registry name, then name/slug; identifiers are unique and never move.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

const CATALOGUE_URL = 'https://weather.acme.example/mcp';
const REGISTRY_NAME = 'io.github.acme/weather';
const SLUG = 'io-github-acme-weather';
// Two reported URLs whose derived names collide with the catalogue server's identifiers.
const BY_NAME = 'https://io.github.acme/weather';
const BY_SLUG = 'https://io-github-acme-weather';

let clock = new Date('2026-10-05T09:00:00Z');
let t: TestApp;
let octet = 0;
const nextAddress = () => `198.51.100.${++octet}`;

const entry = (name: string, url: string, type = 'streamable-http') => ({
  server: { name, version: '1.0.0', remotes: [{ type, url }] },
  _meta: { 'io.modelcontextprotocol.registry/official': { status: 'active', isLatest: true } },
});

async function report(url: string, success: boolean, address: string, n = 1) {
  for (let i = 0; i < n; i++) {
    const res = await postJson(`${t.base}/api/report`, { server_url: url, success, latency_ms: success ? 40 : 900, http_status: success ? 200 : 500 }, { 'x-forwarded-for': address });
    expect(res.status, await res.clone().text()).toBe(200);
  }
}

const get = (path: string) => json(fetch(`${t.base}${path}`));
const preflightUrl = async (target: string) => (await get(`/v1/preflight?target=${encodeURIComponent(target)}`)).server_url as string | null;

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' }, { now: () => clock });
  const s = await t.obs.services.catalogue.importDocument({ servers: [entry(REGISTRY_NAME, CATALOGUE_URL), entry(REGISTRY_NAME, 'https://weather.acme.example/sse', 'sse')], metadata: { count: 2 } });
  expect(s.added).toBe(2);
  // The real server has a little honest evidence (failures: an attacker would like to hide them).
  for (let i = 0; i < 3; i++) await report(CATALOGUE_URL, false, nextAddress(), 2);
  // The attack: one address floods successes for the two look-alike URLs.
  const attacker = '203.0.113.66';
  await report(BY_NAME, true, attacker, 15);
  await report(BY_SLUG, true, attacker, 15);
}, 120_000);
afterAll(async () => {
  await t?.close();
});

describe(`server identity cannot be taken over (${backend})`, () => {
  it('pre-flight by registry name, slug, upper case or spaced variants answers for the catalogue server', async () => {
    for (const target of [REGISTRY_NAME, SLUG, 'IO.GITHUB.ACME/WEATHER', ` ${REGISTRY_NAME} `, 'io-github-acme-weather']) {
      expect(await preflightUrl(target), target).toBe(CATALOGUE_URL);
    }
    const p = await get(`/v1/preflight?target=${encodeURIComponent(REGISTRY_NAME)}`);
    expect(p.verdict).toBe('FAIL');
    // The look-alike servers are still tracked, under their own URLs.
    expect(await preflightUrl(BY_NAME)).toBe(BY_NAME);
    expect(await preflightUrl(BY_SLUG)).toBe(BY_SLUG);
  });

  it('/benchmark/{slug} and /api/trust answer for the catalogue server', async () => {
    const b = await get(`/benchmark/${SLUG}`);
    expect(b).toMatchObject({ server_slug: SLUG, server_url: CATALOGUE_URL, name: REGISTRY_NAME });
    expect((await get(`/benchmark/${encodeURIComponent(REGISTRY_NAME)}`)).server_url).toBe(CATALOGUE_URL);
    expect((await get(`/api/trust?url=${encodeURIComponent(REGISTRY_NAME)}`)).server.url).toBe(CATALOGUE_URL);
    expect((await get(`/api/trust?url=${SLUG}`)).server.url).toBe(CATALOGUE_URL);
  });

  it('/agent-query (a paid, signed verdict) signs the catalogue server, by slug and by registry name', async () => {
    const reg = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': nextAddress() });
    const key = (await json(reg)).api_key as string;
    for (const slug of [SLUG, REGISTRY_NAME]) {
      const v = await json(fetch(`${t.base}/agent-query/${encodeURIComponent(slug)}`, { headers: { authorization: `Bearer ${key}` } }));
      expect(v.server_url, slug).toBe(CATALOGUE_URL);
      expect(v.verdict).toBe('FAIL');
      const receipt = await get(`/v1/receipt/${v.receipt_id}`);
      expect(receipt.claim.sub).toBe(CATALOGUE_URL);
    }
  });

  it('every /monitor link leads to the server it is listed for', async () => {
    const board = await get('/api/leaderboard?limit=100');
    const rows = board.servers as { url: string; slug: string; name: string }[];
    expect(rows.map((r) => r.url).sort()).toEqual([BY_SLUG, BY_NAME, CATALOGUE_URL].sort());
    // Slugs are distinct, and the catalogue server keeps the registry slug.
    expect(new Set(rows.map((r) => r.slug)).size).toBe(rows.length);
    expect(rows.find((r) => r.url === CATALOGUE_URL)!.slug).toBe(SLUG);
    const monitor = await (await fetch(`${t.base}/monitor`)).text();
    const hrefs = [...new Set([...monitor.matchAll(/href="(\/monitor\/server\/[^"]+)"/g)].map((m) => m[1]!))];
    expect(hrefs.length).toBeGreaterThanOrEqual(3);
    for (const row of rows) {
      const href = `/monitor/server/${encodeURIComponent(row.slug)}`;
      expect(hrefs).toContain(href);
      const page = await (await fetch(`${t.base}${href}`)).text();
      expect(page, href).toContain(`${row.url} · category`);
    }
  });

  it('names and slugs are unique in the database; a collision gets a distinct, deterministic suffix', async () => {
    const dupes = await t.obs.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT slug FROM servers GROUP BY slug HAVING count(*) > 1
         UNION ALL SELECT lower(name) FROM servers GROUP BY lower(name) HAVING count(*) > 1) d`,
    );
    expect(dupes[0]!.n).toBe(0);
    const rows = await t.obs.db.query<{ url: string; name: string; slug: string }>('SELECT url, name, slug FROM servers ORDER BY id');
    expect(rows).toEqual([
      { url: CATALOGUE_URL, name: REGISTRY_NAME, slug: SLUG },
      { url: 'https://weather.acme.example/sse', name: `${REGISTRY_NAME} (2)`, slug: `${SLUG}-2` },
      { url: BY_NAME, name: `${REGISTRY_NAME} (3)`, slug: `${SLUG}-3` },
      { url: BY_SLUG, name: `${SLUG} (4)`, slug: `${SLUG}-4` },
    ]);
    // The database itself refuses a duplicate slug or name, whatever writes it.
    await expect(t.obs.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://x.example', 'x', $1, 'general')", [SLUG])).rejects.toThrow();
    await expect(t.obs.db.query("INSERT INTO servers (url, name, slug, category) VALUES ('https://y.example', $1, 'fresh-slug', 'general')", [REGISTRY_NAME.toUpperCase()])).rejects.toThrow();
  });

  it('resolution never moves: once an identifier resolves to a server, later reports cannot take it', async () => {
    const first = 'https://alpha.example/mcp';
    await report(first, true, nextAddress());
    expect(await preflightUrl('alpha.example/mcp')).toBe(first);
    expect(await preflightUrl('alpha-example-mcp')).toBe(first);
    // Later servers whose derived names collide with the first one's name or slug.
    for (const later of ['https://alpha-example-mcp', 'https://ALPHA.example:443/mcp/', 'http://alpha.example/mcp', 'https://alpha.example/MCP']) await report(later, true, nextAddress(), 2);
    for (const target of ['alpha.example/mcp', 'alpha-example-mcp', 'ALPHA.EXAMPLE/mcp', first]) expect(await preflightUrl(target), target).toBe(first);
    // A host/path target is the URL it spells (hosts are case-insensitive, paths are not): the /MCP server.
    expect(await preflightUrl('ALPHA.EXAMPLE/MCP')).toBe('https://alpha.example/MCP');
    expect((await get('/benchmark/alpha-example-mcp')).server_url).toBe(first);
    // Variants of the catalogue server's identifiers, reported after the fact, change nothing either.
    for (const later of ['https://IO.GITHUB.ACME/weather/', 'http://io.github.acme/weather', 'https://io-github-acme-weather:443', 'https://io.github.acme/Weather']) await report(later, true, nextAddress(), 2);
    for (const target of [REGISTRY_NAME, SLUG, CATALOGUE_URL]) expect(await preflightUrl(target), target).toBe(CATALOGUE_URL);
    expect((await get(`/benchmark/${SLUG}`)).server_url).toBe(CATALOGUE_URL);
  });

  it('a registry name squatted before its import is bound to the catalogue server by the import (the squatter is renamed, and says so)', async () => {
    const squat = 'https://io.github.late/tool';
    await report(squat, true, nextAddress(), 3);
    expect(await preflightUrl('io.github.late/tool')).toBe(squat);
    const s = await t.obs.services.catalogue.importDocument({ servers: [entry('io.github.late/tool', 'https://tool.late.example/mcp')], metadata: { count: 1 } });
    expect(s.added).toBe(1);
    expect(s.displaced).toEqual([{ url: squat, from: { name: 'io.github.late/tool', slug: 'io-github-late-tool' }, to: { name: 'io.github.late/tool (2)', slug: 'io-github-late-tool-2' }, registryName: 'io.github.late/tool' }]);
    for (const target of ['io.github.late/tool', 'io-github-late-tool']) expect(await preflightUrl(target)).toBe('https://tool.late.example/mcp');
    expect(await preflightUrl('io-github-late-tool-2')).toBe(squat);
    expect(await preflightUrl(squat)).toBe(squat);
    // A second import changes nothing, and no later report gets the name back.
    expect((await t.obs.services.catalogue.importDocument({ servers: [entry('io.github.late/tool', 'https://tool.late.example/mcp')], metadata: { count: 1 } })).displaced).toEqual([]);
    await report('https://io-github-late-tool', true, nextAddress());
    expect(await preflightUrl('io-github-late-tool')).toBe('https://tool.late.example/mcp');
  });

  it('a registry name already bound never moves to another remote or another import', async () => {
    // The registry later lists the weather server at a new URL: the binding stays with the first remote.
    const s = await t.obs.services.catalogue.importDocument({ servers: [entry(REGISTRY_NAME, 'https://weather2.acme.example/mcp')], metadata: { count: 1 } });
    expect(s.added).toBe(1);
    expect(s.conflicts).toEqual([]);
    // Another registry name with the same slug form cannot take it either: a conflict, reported.
    const other = await t.obs.services.catalogue.importDocument({ servers: [entry('io-github/acme.weather', 'https://impostor.example/mcp')], metadata: { count: 1 } });
    expect(other.conflicts).toEqual([{ registryName: 'io-github/acme.weather', url: 'https://impostor.example/mcp', boundTo: CATALOGUE_URL }]);
    for (const target of [REGISTRY_NAME, SLUG, 'io-github/acme.weather']) expect(await preflightUrl(target), target).toBe(CATALOGUE_URL);
    expect(await preflightUrl('https://weather2.acme.example/mcp')).toBe('https://weather2.acme.example/mcp');
    expect(await preflightUrl('https://impostor.example/mcp')).toBe('https://impostor.example/mcp');
  });
});
