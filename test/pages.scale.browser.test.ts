// /monitor and /atlas/report at catalogue scale (issue 23) in Chromium: 100,000 tracked servers
// (seeded in one SQL statement with generate_series, the way a catalogue import leaves them),
// 60 of them with reports through POST /api/report. A person pages through the leaderboard with
// the Next link, searches by name, filters by category and verdict, and opens a server found
// that way; every figure is checked against the JSON API (leaderboard cursors included).
// No timing assertions: the import-speed and latency figures are the bench's
// (`npm run bench -- --only=scale100k`, docs/performance.md).
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { haveChromium, launchChromium, reportChromium } from './support/browser.js';

reportChromium('pages.scale.browser.test');

const ARTIFACTS = path.resolve('test-artifacts');
const SERVERS = 100_000;
const RATED = 60;
const CATEGORIES = ['weather', 'finance', 'search', 'code', 'data', 'productivity', 'media', 'general'];
const urlOf = (i: number) => `https://srv-${i}.scale.example/mcp`;

let t: TestApp;
let ctx: BrowserContext;
let browser: Awaited<ReturnType<typeof launchChromium>> | undefined;

async function open(p: Page, url: string) {
  const res = await p.goto(t.base + url, { waitUntil: 'load' });
  expect(res?.status(), url).toBe(200);
}

describe.skipIf(!haveChromium)(`pages in Chromium at ${SERVERS.toLocaleString('en-US')} servers`, () => {
  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    t = await startTestApp({ NEW_SERVERS_PER_SOURCE_PER_HOUR: '0' });
    // Catalogue servers named like registry entries, spread over the categories, in one
    // statement; their slugs bound as handles in a second one (what the per-row trigger does).
    await t.obs.db.query('ALTER TABLE servers DISABLE TRIGGER servers_bind_slug');
    await t.obs.db.query(
      `INSERT INTO servers (url, name, slug, category, registered_at, registry_name, catalogued_at, registry_status)
       SELECT 'https://srv-' || g || '.scale.example/mcp', 'io.github.owner' || (g % 977) || '/tool-' || g, 'io-github-owner' || (g % 977) || '-tool-' || g,
              ($1::text[])[1 + g % ${CATEGORIES.length}], now() - interval '2 days', 'io.github.owner' || (g % 977) || '/tool-' || g, now() - interval '2 days', 'active'
         FROM generate_series(0, ${SERVERS - 1}) g`,
      [CATEGORIES],
    );
    await t.obs.db.query("INSERT INTO server_handles (handle, server_id, kind) SELECT slug, id, 'registry' FROM servers");
    await t.obs.db.query('ALTER TABLE servers ENABLE TRIGGER servers_bind_slug');
    await t.obs.db.query('ANALYZE servers');
    // Evidence for the first RATED servers, with different success rates (so different verdicts).
    for (let i = 0; i < RATED; i++) {
      for (let k = 0; k < 3; k++) {
        const res = await postJson(`${t.base}/api/report`, { server_url: urlOf(i), success: k < 3 - (i % 4), latency_ms: 40 + i, tool_name: 'lookup' });
        expect(res.status).toBe(200);
      }
    }
    browser = await launchChromium();
    ctx = browser.ctx;
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('pages through the leaderboard with Next, and each page is the API page of the same cursor', async () => {
    const p = await ctx.newPage();
    await open(p, '/monitor');
    const stats = await json(fetch(`${t.base}/api/stats`));
    expect(stats.total_servers_tracked).toBe(SERVERS);
    expect(await p.locator('[data-stat=servers]').innerText()).toBe(SERVERS.toLocaleString('en-US'));
    expect(await p.locator('[data-unrated]').getAttribute('data-unrated')).toBe(String(SERVERS - RATED));
    // The page lists 50 rows, not 100,000.
    const rows = p.locator('table.leaderboard tbody tr');
    expect(await rows.count()).toBe(50);
    const first = await json(fetch(`${t.base}/api/leaderboard?limit=50`));
    expect(first.total_results).toBe(RATED);
    expect(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-url')))).toEqual(first.servers.map((s: { url: string }) => s.url));
    await p.screenshot({ path: path.join(ARTIFACTS, 'monitor-100k.png') });
    await p.locator('a[rel=next]').first().click();
    await p.waitForLoadState('load');
    const second = await json(fetch(`${t.base}/api/leaderboard?limit=50&cursor=${encodeURIComponent(first.next_cursor)}`));
    expect(second.servers.length).toBe(RATED - 50);
    expect(second.next_cursor ?? null).toBeNull();
    const urls2 = await p.locator('table.leaderboard tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-url')));
    expect(urls2).toEqual(second.servers.map((s: { url: string }) => s.url));
    expect(await p.locator('[data-first-rank]').innerText()).toBe('51');
    expect(await p.locator('a[rel=next]').count()).toBe(0);
    expect(await p.locator('a[rel=first]').count()).toBe(1);
    await p.close();
  });

  it('searches /monitor by name among the unrated servers and opens the one found', async () => {
    const p = await ctx.newPage();
    await open(p, '/monitor');
    await p.locator('#q').fill('tool-98765');
    await p.locator('#verdict').selectOption('UNRATED');
    await p.locator('form.inline button').first().click();
    await p.waitForLoadState('load');
    expect(new URL(p.url()).searchParams.get('q')).toBe('tool-98765');
    const rows = p.locator('table.leaderboard tbody tr');
    expect(await rows.count()).toBe(1);
    expect(await rows.first().getAttribute('data-url')).toBe(urlOf(98765));
    await rows.first().locator('a').first().click();
    await p.waitForLoadState('load');
    expect(new URL(p.url()).pathname).toBe(`/monitor/server/io-github-owner${98765 % 977}-tool-98765`);
    await expect(p.locator('h1').innerText()).resolves.toContain('UNRATED');
    await p.close();
  });

  it('lists, searches and pages every tracked server on /atlas/report by category and verdict', async () => {
    const p = await ctx.newPage();
    await open(p, '/atlas/report');
    expect(await p.locator('[data-total=servers]').innerText()).toBe(SERVERS.toLocaleString('en-US'));
    const rows = p.locator('table.servers tbody tr');
    expect(await rows.count()).toBe(50);
    // Rated first: the first row is the leaderboard's first.
    const board = await json(fetch(`${t.base}/api/leaderboard?limit=1`));
    expect(await rows.first().getAttribute('data-url')).toBe(board.servers[0].url);
    await p.locator('#category').selectOption('finance');
    await p.locator('#verdict').selectOption('UNRATED');
    await p.locator('form.inline button').click();
    await p.waitForLoadState('load');
    const perCategory = (await json(fetch(`${t.base}/api/stats`))).categories.find((c: { name: string }) => c.name === 'finance');
    expect(await p.locator('[data-list-total]').getAttribute('data-list-total')).toBe(String(perCategory.unrated));
    expect(await rows.count()).toBe(50);
    for (const cat of await rows.locator('td:nth-child(3)').allInnerTexts()) expect(cat).toBe('finance');
    const page1 = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-url')));
    await p.locator('a[rel=next]').click();
    await p.waitForLoadState('load');
    const page2 = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-url')));
    expect(page2.length).toBe(50);
    expect(page2.filter((u) => page1.includes(u))).toEqual([]);
    // A name search narrows the list to the one server.
    const q = `owner${1003 % 977}/tool-1003`;
    await open(p, `/atlas/report?q=${encodeURIComponent(q)}`);
    expect(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-url')))).toContain(urlOf(1003));
    for (const name of await rows.locator('td:nth-child(2) a').allInnerTexts()) expect(name.toLowerCase()).toContain(q);
    await p.screenshot({ path: path.join(ARTIFACTS, 'atlas-100k.png') });
    await p.close();
  });

  it('refuses a cursor made for another filter, and a forged one, with a readable 400', async () => {
    const first = await json(fetch(`${t.base}/api/leaderboard?limit=5`));
    const other = await fetch(`${t.base}/api/leaderboard?limit=5&category=finance&cursor=${encodeURIComponent(first.next_cursor)}`);
    expect(other.status).toBe(400);
    expect(((await other.json()) as { detail: string }).detail).toMatch(/another filter/);
    const forged = await fetch(`${t.base}/monitor?cursor=${encodeURIComponent(Buffer.from('{"v":1,"s":"x"}').toString('base64url'))}`);
    expect(forged.status).toBe(400);
    expect(forged.headers.get('content-type')).toMatch(/^text\/html/);
  });
});
