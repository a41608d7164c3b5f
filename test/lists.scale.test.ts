// Issue 23, the list side at catalogue scale, against the real database: server search over
// the servers without evidence is trigram-indexed (migration 1570) and still exact, and the
// all-time demand figures come from per-target sums kept by a trigger (migration 1560) that
// always agree with the demand rows themselves. No timing assertions: the figures are the
// bench's (docs/performance.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demandStore, type DemandRow } from '../src/store/demand.js';
import { likePattern, scoreStore, SEARCH_COUNT_CAP, unratedCountStatement } from '../src/store/scores.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  // 600 servers without evidence; every 7th is a "weather" server, a few with LIKE wildcards.
  const urls: string[] = [];
  const names: string[] = [];
  const slugs: string[] = [];
  const cats: string[] = [];
  for (let i = 0; i < 600; i++) {
    const weather = i % 7 === 0;
    urls.push(`https://s${i}.${weather ? 'weatherco' : 'example'}.com/mcp`);
    names.push(i === 3 ? 'Odd 100%_match' : weather ? `Weather station ${i}` : `Server ${i}`);
    slugs.push(`server-${i}`);
    cats.push(i % 2 === 0 ? 'data' : 'weather');
  }
  await t.db.query(`INSERT INTO servers (url, name, slug, category) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])`, [urls, names, slugs, cats]);
}, 120_000);
afterAll(async () => {
  await t?.drop();
});

describe(`server search (${backend})`, () => {
  it('is exact: name, slug or URL contains the text in any case; wildcards are literal; pages cover every match once', async () => {
    const scores = scoreStore(t.db);
    const all = async (search: string, category: string | null = null) => {
      const seen: string[] = [];
      let after: string | null = null;
      let total = -1;
      for (;;) {
        const p = await scores.unratedPage({ category, search, afterUrl: after, limit: 17 });
        total = p.total;
        seen.push(...p.rows.map((r) => r.url));
        if (p.rows.length < 17) break;
        after = p.rows[p.rows.length - 1]!.url;
      }
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen.length).toBe(total);
      return seen;
    };
    expect(await all('weather')).toHaveLength(Math.ceil(600 / 7));
    expect(await all('weatherco.com', 'data')).toHaveLength(Math.ceil(600 / 7 / 2));
    expect(await all('server-59')).toEqual(['https://s59.example.com/mcp', ...Array.from({ length: 10 }, (_, k) => `https://s${590 + k}.${(590 + k) % 7 === 0 ? 'weatherco' : 'example'}.com/mcp`)].sort());
    expect(await all('100%_')).toEqual(['https://s3.example.com/mcp']);
    expect(await all('0%_')).toEqual(['https://s3.example.com/mcp']);
    // Across a separator of the indexed text: never a match.
    expect(await all('station 7\nserver')).toEqual([]);
  });

  it.runIf(backend === 'postgres')('on PostgreSQL the count of a 3+ character search reads the trigram index, not the servers table', async () => {
    const [sql, params] = unratedCountStatement(null, likePattern('weather'));
    await t.db.query('ANALYZE servers');
    const plan = await t.db.transaction(async (tx) => {
      // A 600-row table is cheaper to read whole (a scan, or the primary key in full): take those
      // choices away to see whether the trigram index applies to the search's condition.
      await tx.query('SET LOCAL enable_seqscan = off');
      await tx.query('SET LOCAL enable_indexscan = off');
      return tx.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params);
    });
    const text = plan.map((r) => r['QUERY PLAN']).join('\n');
    expect(text).toContain('servers_search_trgm_idx');
    expect(text).toMatch(/Bitmap Index Scan on servers_search_trgm_idx/);
    expect(text).not.toMatch(/Seq Scan on servers|servers_pkey/);
  });

  it('counts a search that matches most servers up to SEARCH_COUNT_CAP and says so, still paging exactly', async () => {
    await t.db.query(
      `INSERT INTO servers (url, name, slug, category) SELECT 'https://bulk-' || i || '.example.org/mcp', 'Bulk item ' || i, 'bulk-' || i, 'data' FROM generate_series(1, $1::int) i`,
      [SEARCH_COUNT_CAP + 50],
    );
    const scores = scoreStore(t.db);
    const first = await scores.unratedPage({ category: null, search: 'bulk', afterUrl: null, limit: 20 });
    expect(first).toMatchObject({ total: SEARCH_COUNT_CAP, capped: true });
    expect(first.rows).toHaveLength(20);
    const second = await scores.unratedPage({ category: null, search: 'bulk', afterUrl: first.rows[19]!.url, limit: 20 });
    expect(new Set([...first.rows, ...second.rows].map((r) => r.url)).size).toBe(40);
    // Below the cap the count is exact.
    expect(await scores.unratedPage({ category: null, search: 'bulk-1000', afterUrl: null, limit: 5 })).toMatchObject({ total: 11, capped: false });
  }, 120_000);

  it('the migration installs the trigram index where pg_trgm exists (PGlite ships it)', async () => {
    const rows = await t.db.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE tablename = 'servers' AND indexname = 'servers_search_trgm_idx'`);
    expect(rows).toHaveLength(1);
  });
});

describe(`all-time demand from per-target sums (${backend})`, () => {
  it('agrees with the hourly sums and with the demand rows, whichever way they were written', async () => {
    const demand = demandStore(t.db);
    const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const row = (s: number, target: string, server_url: string | null, verdict: string, name: string | null = null): DemandRow => ({ checked_at: at(s), target, server_url, name, verdict, kind: 'preflight', receipt_id: null });
    await demand.insert(row(1, 'https://s0.weatherco.com/mcp', null, 'UNRATED'));
    await demand.insertMany([
      row(5, 'https://s0.weatherco.com/mcp', 'https://s0.weatherco.com/mcp', 'PASS'),
      row(3, 'https://s0.weatherco.com/mcp', 'https://s0.weatherco.com/mcp', 'FAIL'),
      row(2, 'acme search', null, 'UNRATED', 'acme search'),
      row(2, 'https://s1.example.com/mcp', 'https://s1.example.com/mcp', 'UNCERTAIN'),
    ]);
    // The same second twice: the later row (higher id) is the last verdict.
    await demand.insertMany([row(5, 'https://s0.weatherco.com/mcp', 'https://s0.weatherco.com/mcp', 'UNCERTAIN'), row(4, 'acme search', null, 'UNRATED', 'acme search')]);
    const totals = await demand.totals(null);
    const top = await demand.topTargets(null, 10);
    const byCat = await demand.checksByCategory(null);
    // The same figures from the hourly sums (the windowed form of the same queries), and the
    // checks per category straight from the rows.
    const since = new Date(0);
    const fromRows = await t.db.query<{ category: string | null; checks: number }>(
      `SELECT s.category, sum(d.checks)::int8 AS checks FROM preflight_demand d LEFT JOIN servers s ON s.url = d.server_url
        GROUP BY 1 ORDER BY checks DESC, category NULLS LAST`,
    );
    expect(byCat).toEqual(fromRows.map((r) => ({ category: r.category, checks: Number(r.checks) })));
    expect(totals).toEqual(await demand.totals(since));
    expect(top).toEqual(await demand.topTargets(since, 10));
    expect(byCat).toEqual(await demand.checksByCategory(since));
    expect(totals).toMatchObject({ total: 7, unique_targets: 3, pass: 1, uncertain: 2, fail: 1, unrated: 3 });
    expect(top[0]).toMatchObject({ target: 'https://s0.weatherco.com/mcp', server_url: 'https://s0.weatherco.com/mcp', checks: 4, last_verdict: 'UNCERTAIN', pass: 1, fail: 1, uncertain: 1, unrated: 1 });
    expect(top[0]!.last_checked_at.getTime()).toBe(at(5).getTime());
    // The untracked first check of s0 counts as untracked, its later ones under its category.
    expect(Object.fromEntries(byCat.map((c) => [c.category ?? 'untracked', c.checks]))).toEqual({ data: 3, weather: 1, untracked: 3 });
  });
});
