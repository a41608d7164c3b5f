import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCatalogueService, CatalogueImportError } from '../src/services/catalogue.js';
import { expectProblem, json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';

// Catalogue import (issue 13 item 2): the official MCP Registry /v0/servers format, from a
// recorded page on disk and from a local HTTP stand-in serving two pages linked by nextCursor.

const FIXTURES = join(import.meta.dirname, 'fixtures');
const PAGE1 = join(FIXTURES, 'mcp-registry-v0-servers.page1.json');
const PAGE2 = join(FIXTURES, 'mcp-registry-v0-servers.page2.json');
const page1 = JSON.parse(readFileSync(PAGE1, 'utf8')) as { metadata: { nextCursor: string } };

let t: TestApp;
let registry: http.Server;
let registryBase: string;
let tmp: string;
const requests: string[] = [];
// What the stand-in answers per path (after the /v0/servers pages).
const extra = new Map<string, (req: http.IncomingMessage, res: http.ServerResponse) => void>();

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'obs-catalogue-'));
  registry = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    const u = new URL(req.url ?? '/', 'http://x');
    const handler = extra.get(u.pathname);
    if (handler) return handler(req, res);
    if (u.pathname !== '/v0/servers') return res.writeHead(404).end();
    const cursor = u.searchParams.get('cursor');
    const body = cursor === null ? readFileSync(PAGE1) : cursor === page1.metadata.nextCursor ? readFileSync(PAGE2) : null;
    if (!body) return res.writeHead(400, { 'content-type': 'application/json' }).end('{"title":"bad cursor"}');
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  registryBase = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
});
afterAll(async () => {
  registry?.closeAllConnections();
  await new Promise((r) => registry?.close(r));
  await t?.close();
  await rm(tmp, { recursive: true, force: true });
});

const get = (path: string) => json(fetch(`${t.base}${path}`));

describe(`catalogue import (${backend})`, () => {
  it('imports a recorded registry page from a file: remotes tracked, local-only counted, the rest skipped with reasons', async () => {
    const s = await t.obs.services.catalogue.importFile(PAGE1);
    expect(s).toMatchObject({ pages: 1, entries: 6, added: 3, updated: 0, localOnly: 1, skippedCount: 3 });
    expect(s.stoppedEarly).toMatch(/nextCursor/);
    expect(s.skipped).toEqual([
      { name: 'io.github.acme/ledger', reason: 'not the latest version' },
      { name: 'io.github.tenant/crm remote 0', reason: 'the url is a template that needs variables' },
      { name: 'io.github.odd/websocket remote 0', reason: 'transport "websocket" is not streamable-http or sse' },
    ]);
    expect(s.servers.map((x) => [x.registryName, x.transport, x.url, x.category])).toEqual([
      ['io.github.acme/weather', 'streamable-http', 'https://weather.acme.example/mcp', 'weather'],
      ['io.github.acme/weather', 'sse', 'https://weather.acme.example/sse', 'weather'],
      ['com.example/web-search', 'streamable-http', 'https://mcp.example.com/search', 'search'],
    ]);
  });

  it('an imported server is tracked but UNRATED: trust record, pre-flight, stats, leaderboard and /atlas/report', async () => {
    // The registry name resolves wherever a server name is accepted: /api/trust, pre-flight, sla-tier, benchmark.
    const rec = await get(`/api/trust?url=${encodeURIComponent('io.github.acme/weather')}`);
    expect(rec.server).toMatchObject({ url: 'https://weather.acme.example/mcp', name: 'io.github.acme/weather', category: 'weather', trust_score: 50 });
    expect(rec.verdict).toBe('UNRATED');
    expect(rec.metrics).toMatchObject({ total_interactions: 0, success_rate: null });
    expect((await get(`/api/trust?url=${encodeURIComponent('IO.GITHUB.ACME/WEATHER')}`)).server.url).toBe('https://weather.acme.example/mcp');
    expect((await get('/api/trust?url=io-github-acme-weather')).server.url).toBe('https://weather.acme.example/mcp');
    // The second remote of a registry server has its own name and slug (names and slugs are unique;
    // the registry name resolves to the streamable-http remote, imported first).
    const sse = await get(`/api/trust?url=${encodeURIComponent('https://weather.acme.example/sse')}`);
    expect(sse.server.name).toBe('io.github.acme/weather (2)');
    expect((await get('/api/trust?url=io-github-acme-weather-2')).server.url).toBe('https://weather.acme.example/sse');
    await expectProblem(await fetch(`${t.base}/api/trust?url=${encodeURIComponent('io.github.nobody/nothing')}`), 404, 'not_tracked');
    await expectProblem(await fetch(`${t.base}/api/trust?url=javascript:alert(1)`), 400, 'invalid_argument');

    for (const target of ['io.github.acme/weather', 'com.example/web-search', 'https://mcp.example.com/search']) {
      const p = await get(`/v1/preflight?target=${encodeURIComponent(target)}`);
      expect(p).toMatchObject({ verdict: 'UNRATED', tracked: true, trust_score: null });
    }
    expect((await get(`/v1/preflight?target=${encodeURIComponent('io.github.acme/weather')}`)).server_url).toBe('https://weather.acme.example/mcp');
    expect((await get(`/api/sla-tier?server=${encodeURIComponent('io.github.acme/weather')}`)).tier).toBe('Unrated');
    expect((await get('/benchmark/io-github-acme-weather')).verdict).toBe('UNRATED');

    const stats = await get('/api/stats');
    expect(stats).toMatchObject({ total_servers_tracked: 3, total_servers_rated: 0, total_servers_unrated: 3, total_interactions_recorded: 0 });
    expect(stats.categories).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'weather', servers: 2, rated: 0, unrated: 2 }),
        expect.objectContaining({ name: 'search', servers: 1, rated: 0, unrated: 1 }),
      ]),
    );
    expect(stats.verdict_mix.unrated).toBe(3);
    const board = await get('/api/leaderboard');
    expect(board).toMatchObject({ total_results: 0, unrated_count: 3, servers: [] });
    expect((await get('/api/leaderboard?category=weather')).unrated_count).toBe(2);

    const page = await (await fetch(`${t.base}/atlas/report`)).text();
    expect(page).toMatch(/<tr data-category="weather">[\s\S]*?data-col="servers">2<[\s\S]*?data-col="rated">0<[\s\S]*?data-col="unrated">2</);
    expect(page).toMatch(/data-total="unrated">3</);
  });

  it('follows nextCursor through a registry URL (two pages) and a second import duplicates nothing', async () => {
    requests.length = 0;
    const s = await t.obs.services.catalogue.importUrl(`${registryBase}/v0/servers`);
    expect(requests).toEqual(['/v0/servers', `/v0/servers?cursor=${encodeURIComponent(page1.metadata.nextCursor)}`]);
    expect(s).toMatchObject({ pages: 2, entries: 10, added: 1, updated: 3, localOnly: 2, skippedCount: 4, stoppedEarly: null });
    expect(s.skipped.slice(3)).toEqual([{ name: 'entry 2', reason: 'no "server" object' }]);
    // A server the registry deleted is not tracked (nothing listed it before) but reported.
    expect(s.withdrawn).toEqual({ entries: 1, servers: 0, names: ['io.github.gone/retired'] });
    expect(s.servers.find((x) => x.added)).toMatchObject({ registryName: 'ai.example/finance-data', transport: 'sse', category: 'finance' });

    const again = await t.obs.services.catalogue.importUrl(`${registryBase}/v0/servers`);
    expect(again).toMatchObject({ added: 0, updated: 4 });
    const [servers] = await t.obs.db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM servers');
    expect(servers!.n).toBe(4);
    const [scheduled] = await t.obs.db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM observation_schedule');
    expect(scheduled!.n).toBe(4);
    const meta = await t.obs.db.query<{ registry_name: string; title: string; description: string; repository_url: string; registry_version: string; transport: string }>(
      "SELECT registry_name, title, description, repository_url, registry_version, transport FROM servers WHERE url = 'https://finance.example.net/sse'",
    );
    expect(meta[0]).toEqual({
      registry_name: 'ai.example/finance-data',
      title: 'Finance Data',
      description: 'Stock quotes, currency exchange rates and company filings.',
      repository_url: 'https://github.com/example-ai/finance-data',
      registry_version: '3.1.0',
      transport: 'sse',
    });
    // Stats are a whole-index figure: they show the import within AGGREGATE_SETTLE_MS.
    await aggregatesSettled();
    expect((await get('/api/stats')).total_servers_unrated).toBe(4);
  });

  it('a re-import updates metadata in place', async () => {
    const doc = JSON.parse(readFileSync(PAGE2, 'utf8'));
    doc.servers[0].server.title = 'Finance Data Pro';
    doc.servers[0].server.version = '3.2.0';
    const s = await t.obs.services.catalogue.importDocument(doc);
    expect(s).toMatchObject({ added: 0, updated: 1 });
    const [row] = await t.obs.db.query<{ title: string; registry_version: string }>("SELECT title, registry_version FROM servers WHERE registry_name = 'ai.example/finance-data'");
    expect(row).toEqual({ title: 'Finance Data Pro', registry_version: '3.2.0' });
  });

  it('refuses a registry on a loopback address unless ALLOW_PRIVATE_TARGETS is set', async () => {
    const strict = createCatalogueService({ db: t.obs.db, config: { allowPrivateTargets: false }, now: () => new Date() });
    await expect(strict.importUrl(`${registryBase}/v0/servers`)).rejects.toThrow(/registry refused: .*loopback .*ALLOW_PRIVATE_TARGETS=1/);
  });

  it('hostile input: clear errors or skipped entries, never a crash', async () => {
    const c = t.obs.services.catalogue;
    const bad = async (file: string, content: string | null, message: RegExp) => {
      const path = join(tmp, file);
      if (content !== null) await writeFile(path, content);
      const err = await c.importFile(path).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CatalogueImportError);
      expect((err as Error).message).toMatch(message);
    };
    await bad('missing.json', null, /cannot read .*ENOENT/);
    await bad('broken.json', '{"servers": [', /is not valid JSON/);
    await bad('array.json', '[1,2,3]', /expected a JSON object with a "servers" array/);
    await bad('wrong.json', '{"servers": {"a": 1}}', /"servers" is missing or not an array/);
    await bad('cursor.json', '{"servers": [], "metadata": {"nextCursor": 42}}', /nextCursor/);
    // A huge file is refused by its size, before it is read (a sparse file: no disk used).
    const huge = join(tmp, 'huge.json');
    await writeFile(huge, '');
    await truncate(huge, 65 * 1024 * 1024);
    await bad('huge.json', null, /more than the 67108864-byte limit/);

    const weird = await c.importDocument({
      servers: [
        null,
        42,
        { server: { name: 'no-namespace' } },
        { server: { name: 'x/'.repeat(200) } },
        { server: { name: 'io.github.x/remotes-object', remotes: { type: 'sse' } } },
        { server: { name: 'io.github.x/nothing' } },
        { server: { name: 'io.github.x/many', remotes: [null, { type: 'sse' }, { type: 'sse', url: 'ftp://x.example/mcp' }, { type: 'streamable-http', url: 'https://u:p@x.example/mcp' }, { type: 'streamable-http', url: 'not a url' }] } },
        { server: { name: 'io.github.x/ok', description: 'a\u0000b\u202Ec'.repeat(2000), title: 42, repository: { url: 'javascript:alert(1)' }, remotes: [{ type: 'streamable-http', url: 'https://ok.x.example/mcp' }, { type: 'streamable-http', url: 'https://OK.x.example/mcp/' }] } },
      ],
      metadata: 'nope',
    });
    expect(weird).toMatchObject({ entries: 8, added: 1 });
    expect(weird.skipped.map((x) => x.reason)).toEqual([
      'no "server" object',
      'no "server" object',
      'no valid registry name (namespace/name)',
      'no valid registry name (namespace/name)',
      '"remotes" is not an array',
      'lists neither remotes nor packages',
      'not an object',
      'no url',
      'bad url: only http and https URLs are accepted',
      'bad url: URLs with credentials are not accepted',
      'bad url: not an absolute URL',
    ]);
    const [ok] = await t.obs.db.query<{ title: string | null; description: string; repository_url: string | null }>(
      "SELECT title, description, repository_url FROM servers WHERE url = 'https://ok.x.example/mcp'",
    );
    expect(ok!.title).toBeNull();
    expect(ok!.repository_url).toBeNull();
    expect(ok!.description.length).toBeLessThanOrEqual(2000);
    expect(ok!.description).not.toMatch(/\u0000/);
  });

  it('stops on a cursor loop and reports HTTP errors and non-JSON pages', async () => {
    extra.set('/loop', (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ servers: [], metadata: { nextCursor: 'same', count: 0 } })));
    extra.set('/error', (_req, res) => res.writeHead(503).end('down'));
    extra.set('/html', (_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>'));
    const c = t.obs.services.catalogue;
    const loop = await c.importUrl(`${registryBase}/loop`);
    expect(loop.pages).toBe(2);
    expect(loop.stoppedEarly).toMatch(/repeated cursor "same"/);
    await expect(c.importUrl(`${registryBase}/error`)).rejects.toThrow(/answered HTTP 503/);
    await expect(c.importUrl(`${registryBase}/html`)).rejects.toThrow(/is not valid JSON/);
    await expect(c.importUrl('http://127.0.0.1:1/v0/servers')).rejects.toThrow(/registry unreachable/);
  });
});
