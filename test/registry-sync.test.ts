import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { createCatalogueService } from '../src/services/catalogue.js';
import { createRegistrySync } from '../src/services/registry-sync.js';
import { observationStore } from '../src/store/observation.js';
import { registrySyncStore } from '../src/store/registry-sync.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// MCP Registry API v0.1 and the standing sync (issue 19 item 4): `import` of a registry base URL
// reads /v0.1/servers and follows cursors; the sync job asks for entries updated since its last
// complete run, once per period across instances, and marks deprecated and deleted servers.
// A loopback stand-in serves pages in the v0.1 format (test/fixtures/mcp-registry-v0.1-*.json).

const FIXTURES = join(import.meta.dirname, 'fixtures');
const fixture = (name: string) => readFileSync(join(FIXTURES, `mcp-registry-v0.1-servers.${name}.json`));
const PAGE1_CURSOR = 'io.github.acme/ledger:0.9.0';
const FULL_MARK = '2025-11-10T12:00:00.654321Z';
const DELTA_MARK = '2025-11-13T07:00:00.999999Z';

let t: TestApp;
let registry: http.Server;
let base: string;
const requests: string[] = [];
/** Answers of /v0.1/servers?updated_since=..., by the mark asked for. */
const sinceAnswers = new Map<string, () => { status: number; body: Buffer | string }>();

beforeAll(async () => {
  registry = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    const u = new URL(req.url ?? '/', 'http://x');
    const reply = (status: number, body: Buffer | string) => res.writeHead(status, { 'content-type': 'application/json' }).end(body);
    if (u.pathname === '/old/v0/servers') return reply(200, readFileSync(join(FIXTURES, 'mcp-registry-v0-servers.page2.json')));
    if (u.pathname !== '/v0.1/servers') return reply(404, '{"title":"Not Found","status":404}');
    const since = u.searchParams.get('updated_since');
    if (since !== null) {
      const answer = sinceAnswers.get(since);
      if (!answer) return reply(400, JSON.stringify({ title: 'unexpected updated_since', detail: since }));
      const a = answer();
      return reply(a.status, a.body);
    }
    const cursor = u.searchParams.get('cursor');
    if (cursor === null) return reply(200, fixture('page1'));
    if (cursor === PAGE1_CURSOR) return reply(200, fixture('page2'));
    return reply(400, '{"title":"bad cursor"}');
  });
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', REGISTRY_SYNC_URL: base, REGISTRY_SYNC_INTERVAL_SECONDS: '3600' });
}, 120_000);
afterAll(async () => {
  await t?.close();
  registry?.closeAllConnections();
  await new Promise((r) => registry?.close(r));
});

const trust = (server: string) => json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(server)}`));
const preflight = (target: string) => json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`));
const scheduled = async () => new Set((await observationStore(t.obs.db).rows()).map((r) => Number(r.server_id)));
const idOf = async (url: string) => Number((await t.obs.db.query<{ id: number }>('SELECT id FROM servers WHERE url = $1', [url]))[0]!.id);

describe(`MCP Registry v0.1 and the standing sync (${backend})`, () => {
  it('configuration: REGISTRY_SYNC_URL must be http(s); the interval is bounded', () => {
    expect(() => loadConfig({ REGISTRY_SYNC_URL: 'ftp://registry.example' })).toThrow(/REGISTRY_SYNC_URL/);
    expect(() => loadConfig({ REGISTRY_SYNC_INTERVAL_SECONDS: '5' })).toThrow(/REGISTRY_SYNC_INTERVAL_SECONDS.*between 60/);
    expect(loadConfig({}).registrySync).toEqual({ url: null, intervalSeconds: 3600 });
  });

  it('the first sync reads /v0.1/servers from the base URL, follows the cursor, and records the high-water mark', async () => {
    requests.length = 0;
    // Started by listen() (REGISTRY_SYNC_URL is set): its start-up run is the first sync.
    await t.obs.services.registrySync.ready();
    expect(requests).toEqual(['/v0.1/servers', `/v0.1/servers?cursor=${encodeURIComponent(PAGE1_CURSOR)}`]);
    const state = await t.obs.services.registrySync.state();
    expect(state).toMatchObject({ source: base, high_water: FULL_MARK, last_error: null, last_summary: { updated_since: null, pages: 2, entries: 6, added: 4, deprecated: 1 } });

    const weather = await trust('io.github.acme/weather');
    expect(weather.server.url).toBe('https://weather.acme.example/mcp');
    expect(weather.registry).toEqual({ name: 'io.github.acme/weather', status: 'active', status_message: null, status_changed_at: null, updated_at: '2025-11-03T10:00:00.123Z' });
    const ledger = await trust('io.github.acme/ledger');
    expect(ledger.registry).toMatchObject({ status: 'deprecated', status_message: 'Replaced by io.github.acme/ledger2', status_changed_at: '2025-11-10T12:00:00.000Z' });
    expect((await preflight('io.github.acme/ledger')).registry).toMatchObject({ name: 'io.github.acme/ledger', status: 'deprecated' });
    // A server no registry listed has no listing.
    expect((await preflight('https://never-listed.example/mcp')).registry).toBeNull();
    expect(await scheduled()).toEqual(new Set(await Promise.all(['https://weather.acme.example/mcp', 'https://mcp.example.com/search', 'https://ledger.acme.example/sse', 'https://travel.acme.example/mcp'].map(idOf))));
  });

  it('runs once per period across instances; the next period asks only for what changed (updated_since) and marks deprecated and deleted servers', async () => {
    sinceAnswers.set(FULL_MARK, () => ({ status: 200, body: fixture('updated-since') }));
    const period = 3600_000;
    const T = new Date(Math.ceil(Date.now() / period) * period + period);
    // Two more instances on the same database: in this period only one of them syncs.
    const deps = { db: t.obs.db, now: () => T, config: t.config };
    const catalogue = createCatalogueService({ db: t.obs.db, config: t.config, now: () => T });
    const a = createRegistrySync(deps, catalogue);
    const b = createRegistrySync(deps, catalogue);
    try {
      requests.length = 0;
      const jobA = a.start()!;
      b.start();
      await Promise.all([a.ready(), b.ready()]);
      expect(requests).toEqual([`/v0.1/servers?updated_since=${encodeURIComponent(FULL_MARK)}`]);
      expect(await jobA.tick(new Date(T.getTime() + 1000))).toBe(false);
    } finally {
      await a.close();
      await b.close();
    }
    const state = await registrySyncStore(t.obs.db).state(base);
    expect(state).toMatchObject({ high_water: DELTA_MARK, last_error: null, last_summary: { updated_since: FULL_MARK, entries: 4, added: 1, updated: 2, deprecated: 1, withdrawn_entries: 1, withdrawn_servers: 1 } });

    // Deleted: still tracked (its evidence stays) but marked, and off the observation schedule.
    const travel = await trust('https://travel.acme.example/mcp');
    expect(travel.registry).toEqual({
      name: 'io.github.acme/travel',
      status: 'deleted',
      status_message: 'Service discontinued',
      status_changed_at: '2025-11-12T00:00:00.100Z',
      updated_at: '2025-11-12T00:00:00.100Z',
    });
    expect((await preflight('io.github.acme/travel')).registry.status).toBe('deleted');
    const travelId = await idOf('https://travel.acme.example/mcp');
    expect((await scheduled()).has(travelId)).toBe(false);
    // The observation loop's catch-up does not put it back.
    await observationStore(t.obs.db).syncSchedule(new Date(), { minSources: 1, since: new Date(0) });
    expect((await scheduled()).has(travelId)).toBe(false);

    // Deprecated: marked, still observed.
    expect((await trust('io.github.acme/weather')).registry).toMatchObject({ status: 'deprecated', status_message: 'Moved to io.github.acme/weather-v2' });
    expect((await scheduled()).has(await idOf('https://weather.acme.example/mcp'))).toBe(true);
    // New and updated entries.
    expect((await trust('io.github.newco/maps')).registry).toMatchObject({ status: 'active', updated_at: '2025-11-13T07:00:00.999Z' });
    const [search] = await t.obs.db.query<{ title: string; registry_version: string }>("SELECT title, registry_version FROM servers WHERE registry_name = 'com.example/web-search'");
    expect(search).toEqual({ title: 'Web Search Pro', registry_version: '2.1.0' });

    // The agent doors answer with the same records, listing included.
    const client = new Client({ name: 'registry-sync-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.base}/mcp`)));
    try {
      const mcp = await client.callTool({ name: 'check_trust', arguments: { server: 'io.github.acme/travel' } });
      expect(mcp.isError).toBeFalsy();
      expect((mcp.structuredContent as { registry: unknown }).registry).toEqual(travel.registry);
      const pf = await client.callTool({ name: 'preflight_check', arguments: { target: 'io.github.acme/weather' } });
      expect((pf.structuredContent as { registry: { status: string } }).registry.status).toBe('deprecated');
    } finally {
      await client.close();
    }
    const a2a = await json(
      postJson(`${t.base}/a2a`, { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { role: 'ROLE_USER', messageId: 'r1', parts: [{ text: 'trust score for io.github.acme/travel' }] } } }, { 'A2A-Version': '1.0' }),
    );
    expect(a2a.result.task.artifacts[0].parts[0].data.registry).toEqual(travel.registry);
  });

  it('a failed sync keeps the mark and says why; the next run asks from the same mark; a listed-again server is observed again', async () => {
    let calls = 0;
    sinceAnswers.set(DELTA_MARK, () => (++calls === 1 ? { status: 503, body: '{"title":"maintenance"}' } : { status: 200, body: JSON.stringify({ servers: [], metadata: { count: 0 } }) }));
    const sync = t.obs.services.registrySync;
    await expect(sync.run(new Date())).rejects.toThrow(/answered HTTP 503/);
    expect(await sync.state()).toMatchObject({ high_water: DELTA_MARK, last_error: expect.stringMatching(/HTTP 503/) });
    const ok = await sync.run(new Date());
    expect(ok).toMatchObject({ updatedSince: DELTA_MARK, highWater: DELTA_MARK, summary: { pages: 1, entries: 0 } });
    expect(await sync.state()).toMatchObject({ high_water: DELTA_MARK, last_error: null });

    // The registry lists the deleted server again: it is active and back on the schedule.
    const relisted = JSON.parse(fixture('page2').toString('utf8'));
    const travel = relisted.servers[2];
    travel._meta['io.modelcontextprotocol.registry/official'].updatedAt = '2025-11-20T00:00:00Z';
    sinceAnswers.set(DELTA_MARK, () => ({ status: 200, body: JSON.stringify({ servers: [travel], metadata: { count: 1 } }) }));
    expect((await sync.run(new Date())).highWater).toBe('2025-11-20T00:00:00Z');
    expect((await trust('https://travel.acme.example/mcp')).registry.status).toBe('active');
    expect((await scheduled()).has(await idOf('https://travel.acme.example/mcp'))).toBe(true);
  });

  it('import: a base URL without v0.1 falls back to /v0/servers; a list URL is read as given', async () => {
    const seen: string[] = [];
    const old = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      if (new URL(req.url ?? '/', 'http://x').pathname === '/v0/servers') return res.writeHead(200, { 'content-type': 'application/json' }).end(readFileSync(join(FIXTURES, 'mcp-registry-v0-servers.page2.json')));
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"title":"Not Found"}');
    });
    await new Promise<void>((r) => old.listen(0, '127.0.0.1', r));
    const oldBase = `http://127.0.0.1:${(old.address() as AddressInfo).port}`;
    try {
      const c = t.obs.services.catalogue;
      const s = await c.importUrl(`${oldBase}/`);
      expect(seen).toEqual(['/v0.1/servers', '/v0/servers']);
      expect(s).toMatchObject({ source: `${oldBase}/v0/servers`, pages: 1, entries: 4, withdrawn: { entries: 1, names: ['io.github.gone/retired'] } });
      await expect(c.importUrl(`${oldBase}/v0.1/servers`)).rejects.toThrow(/answered HTTP 404$/);

      requests.length = 0;
      const listed = await c.importUrl(`${base}/v0.1/servers?limit=3`);
      expect(requests).toEqual(['/v0.1/servers?limit=3', `/v0.1/servers?limit=3&cursor=${encodeURIComponent(PAGE1_CURSOR)}`]);
      expect(listed.pages).toBe(2);
    } finally {
      old.closeAllConnections();
      await new Promise((r) => old.close(r));
    }
  });
});
