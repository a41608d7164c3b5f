import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { startModernMcpTarget } from './support/mcp-target.js';
import { MANIFEST_LIMITS, SELF_DESCRIPTION_LIMITS } from '../src/probes/mcp-manifest.js';
import { DRIFT_PAGE_LIMITS } from '../src/services/drift.js';
import { AGGREGATE_SETTLE_MS } from '../src/services/cached-figure.js';
import { DIFF_DISPLAY_LIMITS } from '../src/domain/text-diff.js';
import { MAX_JSON_DEPTH } from '../src/domain/json-depth.js';

// A hostile MCP server's manifest is what the drift check stores and what /drift shows to anyone.
// Before these limits one server with 50 pages of 1 MiB (50 MiB of tools per check, stored as
// drift texts) or a few hundred long descriptions that all change made every GET /drift compare
// each of them line by line (4 M LCS cells per 2,000-line description) and send every line: the
// event loop stopped for seconds per view and the page ran to many megabytes.

const LINES = 2000;
/** A description of LINES short lines; `v` changes every line. */
const description = (tool: number, v: string) => Array.from({ length: LINES }, (_, j) => `tool ${tool} line ${j} ${v}`).join('\n');
const longName = `a${'n'.repeat(MANIFEST_LIMITS.maxNameLength - 1)}`;
/** Long tools in the drift test: about 3.3 MB of tools, inside the probe's 4 MiB. */
const N = 70;

function manifest(v: string, count: number): Tool[] {
  const tools: Tool[] = Array.from({ length: count }, (_, i) => ({ name: `tool_${String(i).padStart(3, '0')}`, description: description(i, v), inputSchema: { type: 'object' } }));
  // Sorted first among the changed tools: a part longer than the page shows, and the longest name the probe takes.
  tools.push({ name: 'a_long', description: `${v} ${'x'.repeat(DRIFT_PAGE_LIMITS.partTextBytes)}`, inputSchema: { type: 'object' } });
  tools.push({ name: longName, description: `named at length ${v}`, inputSchema: { type: 'object' } });
  return tools;
}

let t: TestApp;
let target: Awaited<ReturnType<typeof startModernMcpTarget>>;
beforeAll(async () => {
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
  target = await startModernMcpTarget(manifest('before', N), { pageSize: 20 });
  expect((await postJson(`${t.base}/api/report`, { server_url: target.url, success: true, latency_ms: 5 })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await target?.close();
  await t?.close();
});

const drift = (server: string) => fetch(`${t.base}/api/drift?server=${encodeURIComponent(server)}`);

describe(`a hostile server's manifest on /api/drift and /drift (${backend})`, () => {
  it('a manifest over the probe\'s byte limit is refused (502) and stores nothing', async () => {
    const before = await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM drift_part_texts');
    target.setTools(manifest('huge', 120)); // about 4.6 MB of tools over 7 pages, each page under the safe client's 1 MiB cap
    const body = await expectProblem(await drift(target.url), 502, 'upstream_error');
    expect(String(body.detail)).toContain(`more than ${MANIFEST_LIMITS.maxBytes} bytes`);
    const after = await t.obs.db.query<{ n: number }>('SELECT count(*)::int AS n FROM drift_part_texts');
    expect(after[0]!.n).toBe(before[0]!.n);
  }, 60_000);

  it('a tool name longer than the probe takes is refused (502) naming the limit; what a server says about itself is cut', async () => {
    target.setTools([{ name: `b${'n'.repeat(MANIFEST_LIMITS.maxNameLength)}`, inputSchema: { type: 'object' } }]);
    const body = await expectProblem(await drift(target.url), 502, 'upstream_error');
    expect(String(body.detail)).toContain(`a tool name is longer than ${MANIFEST_LIMITS.maxNameLength} characters`);

    const loud = await startModernMcpTarget([{ name: 'ping', inputSchema: { type: 'object' } }], { name: 'N'.repeat(100_000), version: 'V'.repeat(100_000) });
    try {
      expect((await postJson(`${t.base}/api/report`, { server_url: loud.url, success: true, latency_ms: 5 })).status).toBe(200);
      expect((await drift(loud.url)).status).toBe(200);
      const [facts] = await t.obs.db.query<{ server_name: string; server_version: string }>(
        'SELECT f.server_name, f.server_version FROM mcp_server_facts f JOIN servers s ON s.id = f.server_id WHERE s.url = $1',
        [loud.url],
      );
      expect(facts).toEqual({ server_name: 'N'.repeat(SELF_DESCRIPTION_LIMITS.textChars), server_version: 'V'.repeat(SELF_DESCRIPTION_LIMITS.textChars) });
    } finally {
      await loud.close();
    }
  }, 60_000);

  it('a drift of 74 long tools: /drift details 50, compares within its allowance and stays small', async () => {
    target.setTools(manifest('before', N));
    const baseline = await json(drift(target.url));
    expect(baseline, JSON.stringify(baseline).slice(0, 500)).toMatchObject({ drift_detected: false, tool_count: N + 2 });
    // Every line of every description changes; two tools go, two arrive.
    const next = manifest('after', N + 2).filter((x) => x.name !== 'tool_000' && x.name !== 'tool_001');
    target.setTools(next);
    const b = await json(drift(target.url));
    expect(b.drift_detected).toBe(true);
    expect(b.tools_changed).toHaveLength(N);
    expect(b.tools_added).toEqual([`tool_0${N}`, `tool_0${N + 1}`]);
    expect(b.tools_removed).toEqual(['tool_000', 'tool_001']);

    const res = await fetch(`${t.base}/drift`);
    expect(res.status).toBe(200);
    const page = await res.text();
    // Before: every part of all 74 tools, 4,000 diff lines each (about 9 MB).
    expect(page.length).toBeLessThan(DIFF_DISPLAY_LIMITS.pageChars * 2);
    const start = page.indexOf(`data-server="${target.url}"`);
    const article = page.slice(start, page.indexOf('</article>', start));
    // 50 tools detailed (the changed ones first, by name), the other 44 counted.
    expect(article.match(/<div class="tooldiff" data-tool="[^"]*" data-part="description">/g)).toHaveLength(DRIFT_PAGE_LIMITS.toolsPerDrift);
    expect(article).toContain(`data-more-tools="${N + 2 + 2 - DRIFT_PAGE_LIMITS.toolsPerDrift}"`);
    expect(article).not.toContain('data-change="added"');
    // The long part is named with its size, not read.
    const long = article.slice(article.indexOf('data-tool="a_long" data-part="description"'));
    expect(long.slice(0, 600)).toContain('data-shown="too_long"');
    // A 512-character name is shown cut.
    expect(article).toContain(`${longName.slice(0, 200)}…`);
    expect(page).not.toContain(longName.slice(0, 201));
    // The first descriptions are compared line by line within the page's LCS cells, each diff cut
    // to its lines; once the page's text is read, later parts say so.
    const first = article.slice(article.indexOf('data-tool="tool_002" data-part="description"'));
    expect(first.slice(0, 2000)).toContain('<del>− tool 2 line 0 before</del>');
    expect(article).toContain('data-shown="hidden"');
    expect(article).toContain('data-shown="over_page"');
    const shownLines = (article.match(/<(?:del|ins)>[−+] tool \d+ line/g) ?? []).length;
    expect(shownLines).toBeLessThanOrEqual(DRIFT_PAGE_LIMITS.toolsPerDrift * DIFF_DISPLAY_LIMITS.partLines);
    // The compliance export counts the drift's tools without reading their lists.
    const exp = await json(fetch(`${t.base}/api/compliance?server_url=${encodeURIComponent(target.url)}`));
    expect(exp.anomalies).toContainEqual(
      expect.objectContaining({ flag: 'tool_manifest_drift', description: `tool manifest changed: 2 added, 2 removed, ${N} changed (baseline ${b.baseline_id})` }),
    );
  }, 120_000);
  it('re-checking an unchanged manifest stores no new copy of its tool list (one per manifest)', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const b = await json(drift(target.url));
      expect(b.drift_detected).toBe(false);
      ids.push(b.baseline_id);
    }
    const rows = await t.obs.db.query<{ has_tools: boolean; bytes: number }>(
      'SELECT tools IS NOT NULL AS has_tools, pg_column_size(d.*)::int AS bytes FROM drift_baselines d WHERE baseline_id = ANY($1::text[])',
      [ids],
    );
    // Before: each baseline carried the whole list (74 tools' hashes, about 26 KB here; 700 KB at 2,000 tools).
    expect(rows).toHaveLength(3);
    for (const r of rows) {
      expect(r.has_tools).toBe(false);
      expect(r.bytes).toBeLessThan(2048);
    }
    const [m] = await t.obs.db.query<{ n: number; tools: number }>(
      'SELECT count(*)::int AS n, max(jsonb_array_length(tools))::int AS tools FROM drift_manifests WHERE manifest_hash = (SELECT manifest_hash FROM drift_baselines WHERE baseline_id = $1)',
      [ids[0]],
    );
    expect(m).toEqual({ n: 1, tools: N + 2 });
  }, 60_000);
});

describe(`the daily allowance of stored drift text per server (${backend})`, () => {
  it('keeps texts within DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY, then hashes only, drift still detected and signed', async () => {
    const app = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY: '100000' });
    const text = (v: string): Tool[] => [{ name: 'speak', description: `${v} ${'w'.repeat(60_000)}`, inputSchema: { type: 'object' } }];
    const server = await startModernMcpTarget(text('one'));
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: server.url, success: true, latency_ms: 5 })).status).toBe(200);
      const check = async () => json(fetch(`${app.base}/api/drift?server=${encodeURIComponent(server.url)}`));
      await check(); // about 60 KB stored
      server.setTools(text('two'));
      expect((await check()).drift_detected).toBe(true); // 60 KB used, under 100 KB: stored
      server.setTools(text('three'));
      const third = await check(); // 120 KB used: hashes only
      expect(third).toMatchObject({ drift_detected: true, tools_changed: [{ name: 'speak', changes: ['description'] }] });
      expect((await app.obs.services.receipts.verify(third.receipt)).valid).toBe(true);
      const stored = await app.obs.db.query<{ text_bytes: string }>(
        'SELECT d.text_bytes FROM drift_baselines d JOIN servers s ON s.id = d.server_id WHERE s.url = $1 ORDER BY d.recorded_at, d.seq',
        [server.url],
      );
      expect(stored.map((r) => Number(r.text_bytes) > 60_000)).toEqual([true, true, false]);
      expect(Number(stored[2]!.text_bytes)).toBe(0);
      // The page says why it shows hashes only for the newest change.
      const page = await (await fetch(`${app.base}/drift`)).text();
      const article = page.slice(page.indexOf(`data-server="${server.url}"`));
      expect(article.slice(0, article.indexOf('</article>'))).toContain('data-shown="unknown"');
      expect(await app.obs.db.query('SELECT 1 FROM drift_part_texts WHERE canonical LIKE $1', ['%three %'])).toHaveLength(0);
    } finally {
      await server.close();
      await app.close();
    }
  }, 60_000);

  it('refuses a value that is not a byte count at start-up', async () => {
    await expect(startTestApp({ DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY: 'lots' })).rejects.toThrow(/DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY/);
  });
});

describe(`the daily drift storage job (${backend})`, () => {
  it('drops the tool lists and texts of manifests no reader needs, keeps the latest, the latest drift and its predecessor', async () => {
    let clock = Date.parse('2026-10-01T00:00:00.000Z');
    const app = await startTestApp({}, { now: () => new Date(clock) });
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: 'https://churn.example.com/mcp', success: true, latency_ms: 5 })).status).toBe(200);
      const [row] = await app.obs.db.query<{ id: string; url: string }>("SELECT id, url FROM servers WHERE url = 'https://churn.example.com/mcp'");
      const server = { id: Number(row!.id), url: row!.url };
      const version = (v: string) => [{ name: 'speak', description: `said ${v}`, inputSchema: { type: 'object' as const } }];
      const drift = app.obs.services.drift;
      const hashes: string[] = [];
      // v1 .. v5 (each a drift), then v5 again: the latest drift is v4 -> v5.
      for (const v of ['v1', 'v2', 'v3', 'v4', 'v5', 'v5']) {
        clock += 60_000;
        hashes.push((await drift.recordBaseline(server, version(v))).manifestHash);
      }
      const texts = async () => (await app.obs.db.query<{ canonical: string }>("SELECT canonical FROM drift_part_texts WHERE canonical LIKE '\"said %' ORDER BY canonical")).map((r) => r.canonical);
      expect(await texts()).toEqual(['"said v1"', '"said v2"', '"said v3"', '"said v4"', '"said v5"']);
      // Within a day nothing goes; a day later v1-v3 go.
      expect(await drift.storageJob.tick(new Date(clock))).toBe(true);
      expect(await texts()).toHaveLength(5);
      clock += 2 * 86_400_000;
      expect(await drift.storageJob.tick(new Date(clock))).toBe(true);
      expect(await texts()).toEqual(['"said v4"', '"said v5"']);
      const manifests = (await app.obs.db.query<{ manifest_hash: string }>('SELECT manifest_hash FROM drift_manifests')).map((r) => r.manifest_hash).sort();
      expect(manifests).toEqual([hashes[3], hashes[4]].sort());
      // Every baseline (and its receipt) stays, with its counts; the change lists of drifts no reader needs go.
      const rows = await app.obs.db.query<{ listed: number; counted: number }>(
        "SELECT jsonb_array_length(changes->'changed')::int AS listed, tools_changed AS counted FROM drift_baselines WHERE server_id = $1 ORDER BY recorded_at, seq",
        [server.id],
      );
      expect(rows).toEqual([
        { listed: 0, counted: 0 }, // v1: the first baseline
        { listed: 0, counted: 1 }, // v2, v3: drifts nobody reads any more
        { listed: 0, counted: 1 },
        { listed: 1, counted: 1 }, // v4: the baseline the latest drift was measured against, kept whole
        { listed: 1, counted: 1 }, // v5: the latest drift
        { listed: 0, counted: 0 }, // v5 again: the latest baseline
      ]);
      const exp = await json(fetch(`${app.base}/api/compliance?server_url=${encodeURIComponent(server.url)}`));
      expect(exp.anomalies.filter((a: { flag: string }) => a.flag === 'tool_manifest_drift').map((a: { description: string }) => a.description.replace(/ \(baseline .*\)$/, ''))).toEqual(
        Array(4).fill('tool manifest changed: 0 added, 0 removed, 1 changed'),
      );
      // /drift still shows the latest drift's diff; the next check still compares.
      const page = await (await fetch(`${app.base}/drift`)).text();
      expect(page).toContain('<del>− said v4</del>');
      expect(page).toContain('<ins>+ said v5</ins>');
      clock += 60_000;
      const next = await drift.recordBaseline(server, version('v6'));
      expect(next.driftDetected).toBe(true);
      expect(next.diff.changed).toEqual([{ name: 'speak', changes: ['description'] }]);
      // A check that re-uses a stored list and texts marks them used (and locks them), so a storage
      // job running meanwhile keeps them; texts first seen within 12 hours are left as they are.
      clock += 2 * 86_400_000;
      expect((await drift.recordBaseline(server, version('v5'))).driftDetected).toBe(true);
      const [used] = await app.obs.db.query<{ text_at: Date; list_at: Date }>(
        `SELECT (SELECT first_seen_at FROM drift_part_texts WHERE canonical = '"said v5"') AS text_at,
                (SELECT used_at FROM drift_manifests WHERE manifest_hash = $1) AS list_at`,
        [hashes[4]],
      );
      expect(used).toEqual({ text_at: new Date(clock), list_at: new Date(clock) });
    } finally {
      await app.close();
    }
  }, 60_000);
});

describe(`drifts recorded faster than /drift is read (${backend})`, () => {
  it('cost at most one computation of the list per AGGREGATE_SETTLE_MS; the form still shows the drift its check recorded', async () => {
    const tools = (v: string): Tool[] => [{ name: 'speak', description: `said ${v}`, inputSchema: { type: 'object' } }];
    const small = await startModernMcpTarget(tools('v0'));
    // Counts the list's statement (store/drift.ts recentDrifts) as the service runs it.
    const db = t.obs.db;
    const query = db.query;
    let lists = 0;
    db.query = function (this: typeof db, sql: string, ...rest: unknown[]) {
      if (sql.includes('AS prev_recorded_at')) lists++;
      return (query as (...a: unknown[]) => ReturnType<typeof query>).call(this, sql, ...rest);
    } as typeof query;
    try {
      expect((await postJson(`${t.base}/api/report`, { server_url: small.url, success: true, latency_ms: 5 })).status).toBe(200);
      const [row] = await db.query<{ id: string; url: string }>('SELECT id, url FROM servers WHERE url = $1', [small.url]);
      const server = { id: Number(row!.id), url: row!.url };
      const service = t.obs.services.drift;
      await service.recordBaseline(server, tools('v0'));
      // An attacker's loop: make a server drift, read /drift, again and again. Before, every drift
      // recorded here dropped the list, so each read after one computed it anew (up to
      // DRIFT_PAGE_LIMITS of reading and comparing each time).
      const ROUNDS = 20;
      lists = 0;
      const started = performance.now();
      for (let i = 1; i <= ROUNDS; i++) {
        expect((await service.recordBaseline(server, tools(`v${i}`))).driftDetected).toBe(true);
        expect((await fetch(`${t.base}/drift`)).status).toBe(200);
      }
      const elapsed = performance.now() - started;
      // One computation per settle period begun, plus the first (before: one per drift, 20 here
      // whatever the time taken; the bound is below 20 while the loop takes under 9 s).
      expect(lists, `${lists} lists in ${elapsed.toFixed(0)} ms`).toBeLessThanOrEqual(2 + Math.floor(elapsed / AGGREGATE_SETTLE_MS));

      // The form: its check records a drift and links to it, so the list it shows is begun after it,
      // however recently the list was computed.
      small.setTools(tools('changed by the form'));
      const page = await (await fetch(`${t.base}/drift`)).text();
      expect(page).not.toContain('changed by the form');
      const checked = await fetch(`${t.base}/drift?server=${encodeURIComponent(small.url)}`);
      expect(checked.status).toBe(200);
      const html = await checked.text();
      const anchor = /<a href="#drift-([^"]+)">/.exec(html)?.[1];
      expect(anchor).toBeDefined();
      expect(html).toContain(`<article class="drift" id="drift-${anchor}"`);
      expect(html).toContain('<ins>+ said changed by the form</ins>');
    } finally {
      db.query = query;
      await small.close();
    }
  });
});

describe(`text no UTF-8 reader sees in a manifest (${backend})`, () => {
  it('NUL and lone surrogates in names, descriptions and schemas are stored as U+FFFD: the check answers (it answered 500, or 400 blaming the caller)', async () => {
    const server = await startModernMcpTarget([{ name: 'ok', description: 'fine', inputSchema: { type: 'object' } }]);
    try {
      expect((await postJson(`${t.base}/api/report`, { server_url: server.url, success: true, latency_ms: 5 })).status).toBe(200);
      expect((await drift(server.url)).status).toBe(200);
      const hostile: Tool[][] = [
        [{ name: 'ok', description: 'lone \ud800 here', inputSchema: { type: 'object' } }],
        [{ name: 'ok', description: 'x\udfff', inputSchema: { type: 'object', properties: { ['k\u0000']: { type: 'string', description: 'nul \u0000' } } } }],
        [{ name: 'to\u0000ol', description: 'd', inputSchema: { type: 'object' } }],
        [{ name: 'lone\ud800', description: 'd', inputSchema: { type: 'object' } }],
      ];
      for (const tools of hostile) {
        server.setTools(tools);
        const res = await drift(server.url);
        const body = await json(res);
        expect(res.status, JSON.stringify(tools[0]!.name)).toBe(200);
        expect(body.drift_detected).toBe(true);
      }
      const last = await json(drift(server.url));
      expect(last.drift_detected).toBe(false);
      expect(JSON.stringify(last)).not.toMatch(/\\u0000|\\ud[89a-f]/i);
      expect((await fetch(`${t.base}/drift`)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it(`a tool nesting deeper than ${MAX_JSON_DEPTH} levels is refused (502) naming the limit, before any recursive reader sees it`, async () => {
    // At a few thousand levels hashing (RFC 8785) and storing the tool threw RangeError: a 500.
    let schema: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < MAX_JSON_DEPTH; i++) schema = { type: 'object', properties: { a: schema } };
    const server = await startModernMcpTarget([{ name: 'deep', description: 'd', inputSchema: schema as Tool['inputSchema'] }]);
    try {
      expect((await postJson(`${t.base}/api/report`, { server_url: server.url, success: true, latency_ms: 5 })).status).toBe(200);
      const body = await expectProblem(await drift(server.url), 502, 'upstream_error');
      expect(String(body.detail)).toContain(`nests deeper than ${MAX_JSON_DEPTH} levels`);
    } finally {
      await server.close();
    }
  });
});
