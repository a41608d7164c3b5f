// Issue 23 at test size: the synthetic registry generator, the bulk catalogue import through it
// (real HTTP on 127.0.0.1), keyset cursors (domain and over HTTP, hostile ones included), and the
// bounded caches. The 100,000-server figures are the bench's (`npm run bench -- --only=scale100k`).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseRegistryPage } from '../src/domain/catalogue.js';
import { decodeCursor, encodeCursor, filterSignature, indexAfter, InvalidCursor, type RankKey } from '../src/domain/paging.js';
import { BoundedMap, cacheLimits, setCacheLimits } from '../src/store/cache-limits.js';
import { entryRemoteUrls, registryPage, startRegistry, type RegistryServer } from '../scripts/registry-generator.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { aggregatesSettled } from './support/settle.js';

describe('synthetic MCP Registry v0.1 pages', () => {
  it('serves 100 entries a page with an opaque cursor, deterministic, every category, ending without nextCursor', () => {
    const opts = { servers: 250 };
    const p1 = registryPage(opts, {});
    expect(p1.servers).toHaveLength(100);
    expect(p1.metadata.nextCursor).toBeDefined();
    expect(registryPage(opts, {})).toEqual(p1);
    const p3 = registryPage(opts, { cursor: registryPage(opts, { cursor: p1.metadata.nextCursor }).metadata.nextCursor });
    expect(p3.servers).toHaveLength(50);
    expect(p3.metadata.nextCursor).toBeUndefined();
    const parsed = parseRegistryPage(p1);
    expect(parsed.remotes).toHaveLength(100);
    expect(new Set(parsed.remotes.map((r) => r.url)).size).toBe(100);
    expect(new Set(parsed.remotes.map((r) => r.category)).size).toBeGreaterThan(8);
    expect(parsed.remotes.some((r) => r.transport === 'sse')).toBe(true);
    // About 1 in 97 is deprecated.
    const big = { servers: 1000 };
    let deprecated = 0;
    for (let c: string | undefined = undefined, k = 0; k < 10; k++) {
      const pg = registryPage(big, { cursor: c });
      deprecated += parseRegistryPage(pg).remotes.filter((r) => r.listing.status === 'deprecated').length;
      c = pg.metadata.nextCursor;
    }
    expect(deprecated).toBeGreaterThan(3);
    // A garbage cursor reads as past the end, never as a crash.
    expect(registryPage(opts, { cursor: '!!!' }).servers).toEqual([]);
  });
});

describe('keyset cursors (src/domain/paging.ts)', () => {
  const sig = filterSignature({ category: 'weather', q: null, verdict: null });
  it('round-trips a key bound to its filter and refuses another filter or a forged cursor', () => {
    const key: RankKey = { s: 72.5, n: 14, u: 'https://a.example/mcp' };
    expect(decodeCursor(encodeCursor(key, sig), sig)).toEqual(key);
    expect(() => decodeCursor(encodeCursor(key, sig), filterSignature({ category: null, q: null, verdict: null }))).toThrow(/another filter/);
    for (const bad of ['', 'x'.repeat(600), 'not base64!', Buffer.from('{"v":1,"s":"x","n":1,"u":"a","f":""}').toString('base64url'), Buffer.from('[]').toString('base64url'), Buffer.from('nope').toString('base64url')]) {
      expect(() => decodeCursor(bad, sig), bad.slice(0, 20)).toThrow(InvalidCursor);
    }
  });

  it('finds the first row after a key, scores first, then report count, then URL; unscored last', () => {
    const rows: RankKey[] = [
      { s: 90, n: 5, u: 'b' },
      { s: 90, n: 5, u: 'c' },
      { s: 80, n: 9, u: 'a' },
      { s: null, n: 0, u: 'a' },
      { s: null, n: 0, u: 'z' },
    ];
    const k = (r: RankKey) => r;
    expect(indexAfter(rows, k, { s: 90, n: 5, u: 'b' })).toBe(1);
    expect(indexAfter(rows, k, { s: 85, n: 1, u: 'q' })).toBe(2);
    expect(indexAfter(rows, k, { s: null, n: 0, u: 'a' })).toBe(4);
    expect(indexAfter(rows, k, { s: 100, n: 0, u: '' })).toBe(0);
  });
});

describe('bounded caches (CACHE_MAX_ENTRIES)', () => {
  it('drops the oldest entry when full; setting an entry again makes it the newest', () => {
    const before = cacheLimits().maxEntries;
    try {
      setCacheLimits({ maxEntries: 3 });
      const m = new BoundedMap<string, number>();
      m.set('a', 1).set('b', 2).set('c', 3);
      m.set('a', 10);
      m.set('d', 4);
      expect([...m.keys()]).toEqual(['c', 'a', 'd']);
      for (let i = 0; i < 1000; i++) m.set(`k${i}`, i);
      expect(m.size).toBe(3);
      // A limit lowered at run time holds from the next set on, even of a key already there.
      setCacheLimits({ maxEntries: 5 });
      for (let i = 0; i < 5; i++) m.set(`n${i}`, i);
      setCacheLimits({ maxEntries: 2 });
      m.set('n3', 30);
      expect([...m.entries()]).toEqual([
        ['n4', 4],
        ['n3', 30],
      ]);
      // A map given its own limit follows that one, not CACHE_MAX_ENTRIES; onEvict sees each entry dropped.
      let own = 1;
      const evicted: [string, number][] = [];
      const b = new BoundedMap<string, number>(
        () => own,
        (k, v) => evicted.push([k, v]),
      );
      b.set('x', 1).set('y', 2);
      expect([...b.keys()]).toEqual(['y']);
      expect(evicted).toEqual([['x', 1]]);
      own = 2;
      b.set('z', 3);
      expect([...b.keys()]).toEqual(['y', 'z']);
      expect(() => setCacheLimits({ maxEntries: 0 })).toThrow();
    } finally {
      setCacheLimits({ maxEntries: before });
    }
  });
});

describe('catalogue import and paged lists over HTTP', () => {
  let t: TestApp;
  let registry: RegistryServer;
  const gen = { servers: 250, seed: 7 };
  beforeAll(async () => {
    registry = await startRegistry(gen);
    t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', NEW_SERVERS_PER_SOURCE_PER_HOUR: '0' });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await registry?.close();
  });

  it('imports every page of the generated registry (bulk path), and a second import only updates', async () => {
    const s = await t.obs.services.catalogue.importUrl(registry.url);
    expect(s.pages).toBe(3);
    expect(s.added).toBe(250);
    expect(s.stoppedEarly).toBeNull();
    const stats = await json(fetch(`${t.base}/api/stats`));
    expect(stats.total_servers_tracked).toBe(250);
    expect(stats.verdict_mix.unrated).toBe(250);
    const again = await t.obs.services.catalogue.importUrl(registry.url);
    expect(again.added).toBe(0);
    expect(again.updated).toBe(250);
    expect((await json(fetch(`${t.base}/api/stats`))).total_servers_tracked).toBe(250);
    // Imported servers resolve by registry name.
    const name = (registryPage(gen, {}).servers[0] as { server: { name: string } }).server.name;
    const rec = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(name)}`));
    expect(rec.server.url).toBe(entryRemoteUrls(0, gen)[0]);
  }, 120_000);

  it('pages the leaderboard with next_cursor: every rated server once, in rank order', async () => {
    for (let i = 0; i < 25; i++) {
      const res = await postJson(`${t.base}/api/report`, { server_url: entryRemoteUrls(i, gen)[0], success: i % 3 !== 0, latency_ms: 50 + i });
      expect(res.status).toBe(200);
    }
    // The list follows the reports within AGGREGATE_SETTLE_MS (the stats read above may be younger).
    await aggregatesSettled();
    const seen: string[] = [];
    const ranks: number[] = [];
    let cursor: string | undefined;
    for (let pageNo = 0; pageNo < 10; pageNo++) {
      const board = await json(fetch(`${t.base}/api/leaderboard?limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`));
      expect(board.total_results).toBe(25);
      seen.push(...board.servers.map((s: { url: string }) => s.url));
      ranks.push(...board.servers.map((s: { rank: number }) => s.rank));
      cursor = board.next_cursor ?? undefined;
      if (!cursor) break;
    }
    expect(seen).toHaveLength(25);
    expect(new Set(seen).size).toBe(25);
    expect(ranks).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    // Search and verdict filters narrow the list and the count.
    const pass = await json(fetch(`${t.base}/api/leaderboard?verdict=pass&limit=100`));
    for (const s of pass.servers) expect(s.verdict).toBe('PASS');
    const one = (registryPage(gen, {}).servers[3] as { server: { name: string } }).server.name;
    const found = await json(fetch(`${t.base}/api/leaderboard?q=${encodeURIComponent(one.toUpperCase())}`));
    expect(found.servers.map((s: { url: string }) => s.url)).toContain(entryRemoteUrls(3, gen)[0]);
  }, 120_000);

  it('lists the unrated servers on /monitor and /atlas/report one page at a time, without repeats', async () => {
    const urls = new Set<string>();
    let next: string | null = '/atlas/report?verdict=UNRATED';
    let pages = 0;
    while (next && pages < 10) {
      const res = await fetch(t.base + next);
      expect(res.status).toBe(200);
      const text = await res.text();
      for (const m of text.matchAll(/<tr class="r-UNRATED" data-url="([^"]+)"/g)) {
        expect(urls.has(m[1]!)).toBe(false);
        urls.add(m[1]!);
      }
      next = /<a href="([^"]+)#servers" rel="next"/.exec(text)?.[1]?.replace(/&amp;/g, '&') ?? null;
      pages++;
    }
    expect(urls.size).toBe(225);
    expect(pages).toBe(5);
    const monitor = await (await fetch(`${t.base}/monitor?verdict=UNRATED`)).text();
    expect(monitor.match(/<tr class="r-UNRATED"/g)).toHaveLength(50);
  }, 120_000);

  it('pages the trust delta lists with next_cursor: every server once; the summary counts them all', async () => {
    const whole = await json(fetch(`${t.base}/api/trust-delta`));
    for (const [list, field] of [
      ['new', 'servers_new'],
      ['improved', 'servers_improved'],
      ['degraded', 'servers_degraded'],
      ['at_risk', 'servers_at_risk'],
    ] as const) {
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await json(fetch(`${t.base}/api/trust-delta?list=${list}&limit=${list === 'new' ? 40 : 2}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`));
        expect(page.summary).toEqual(whole.summary);
        // Only the list asked for is filled.
        for (const other of ['servers_new', 'servers_improved', 'servers_degraded', 'servers_at_risk'].filter((f) => f !== field)) expect(page[other] ?? []).toEqual([]);
        seen.push(...(page[field] ?? []).map((s: { url: string }) => s.url));
        cursor = page.next_cursor ?? undefined;
        pages++;
      } while (cursor && pages < 50);
      expect(new Set(seen).size, list).toBe(seen.length);
      expect(new Set(seen), list).toEqual(new Set((whole[field] ?? []).map((s: { url: string }) => s.url)));
    }
    expect(whole.summary.new_servers).toBe(250);
    expect(whole.servers_new).toHaveLength(250);
  }, 120_000);

  it('pages one demand window\'s targets with next_cursor: every target once, most checked first', async () => {
    let checks = 0;
    for (let i = 0; i < 30; i++) {
      for (let k = 0; k <= i % 4; k++) {
        const res = await fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(entryRemoteUrls(100 + i, gen)[0]!)}`);
        expect(res.status).toBe(200);
        await res.arrayBuffer();
        checks++;
      }
    }
    const whole = await json(fetch(`${t.base}/api/demand`));
    for (const window of ['24h', 'alltime']) {
      const seen: { target: string; checks: number }[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await json(fetch(`${t.base}/api/demand?window=${window}&limit=7${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`));
        expect(page.windows.map((w: { window: string }) => w.window)).toEqual([window]);
        expect(page.total_preflight_checks).toBe(whole.total_preflight_checks);
        seen.push(...page.windows[0].servers);
        cursor = page.next_cursor ?? undefined;
        pages++;
      } while (cursor && pages < 20);
      expect(pages).toBe(5);
      expect(new Set(seen.map((s) => s.target)).size).toBe(30);
      expect(seen.reduce((a, s) => a + s.checks, 0)).toBe(checks);
      expect(seen.map((s) => s.checks)).toEqual([...seen.map((s) => s.checks)].sort((a, b) => b - a));
    }
    // Without window the answer is as before: every window, the top targets.
    expect(whole.windows.map((w: { window: string }) => w.window)).toEqual(['24h', '7d', '30d', 'alltime']);
    expect(whole.next_cursor ?? null).toBeNull();
  }, 120_000);

  it('refuses bad paging of the trust delta and demand with 400 problem+json', async () => {
    const newPage = await json(fetch(`${t.base}/api/trust-delta?list=new&limit=5`));
    const demandPage = await json(fetch(`${t.base}/api/demand?window=alltime&limit=5`));
    expect(newPage.next_cursor).toBeTruthy();
    expect(demandPage.next_cursor).toBeTruthy();
    for (const path of [
      '/api/trust-delta?list=new&cursor=zzzz',
      `/api/trust-delta?list=new&cursor=${'A'.repeat(600)}`,
      `/api/trust-delta?list=at_risk&cursor=${encodeURIComponent(newPage.next_cursor)}`,
      `/api/trust-delta?list=new&window=7d&cursor=${encodeURIComponent(newPage.next_cursor)}`,
      `/api/trust-delta?cursor=${encodeURIComponent(newPage.next_cursor)}`,
      `/api/trust-delta?list=new&cursor=${encodeURIComponent(demandPage.next_cursor)}`,
      '/api/trust-delta?limit=5',
      '/api/trust-delta?list=new&limit=0',
      '/api/trust-delta?list=new&limit=1001',
      '/api/trust-delta?list=bogus',
      '/api/demand?cursor=abc',
      '/api/demand?limit=3',
      '/api/demand?window=year',
      '/api/demand?window=alltime&limit=101',
      `/api/demand?window=7d&cursor=${encodeURIComponent(demandPage.next_cursor)}`,
      `/api/demand?window=alltime&cursor=${encodeURIComponent(newPage.next_cursor)}`,
    ]) {
      await expectProblem(await fetch(t.base + path), 400, 'invalid_argument');
    }
  }, 120_000);

  it('answers hostile paging input with 400 (problem JSON for the API, HTML for pages), never 500', async () => {
    await expectProblem(await fetch(`${t.base}/api/leaderboard?cursor=${'A'.repeat(5000)}`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/leaderboard?cursor=%00%01`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/leaderboard?verdict=UNRATED`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/leaderboard?verdict=${encodeURIComponent('<script>')}`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/leaderboard?q=${'x'.repeat(300)}`), 400, 'invalid_argument');
    const first = await json(fetch(`${t.base}/api/leaderboard?limit=5`));
    await expectProblem(await fetch(`${t.base}/api/leaderboard?limit=5&q=a&cursor=${encodeURIComponent(first.next_cursor)}`), 400, 'invalid_argument');
    for (const path of ['/monitor?verdict=BOGUS', '/atlas/report?cursor=zzzz', `/monitor?q=${'y'.repeat(300)}`]) {
      const res = await fetch(t.base + path);
      expect(res.status, path).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    }
    // A search with LIKE wildcards is taken literally.
    const page = await (await fetch(`${t.base}/atlas/report?q=${encodeURIComponent('%_')}`)).text();
    expect(page).toContain('No tracked server matches.');
  }, 120_000);
});
