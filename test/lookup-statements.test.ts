// Issue 23: what one cache miss of a lookup costs in statements. At catalogue scale nearly every
// lookup is of a server nobody read in the last SCORE_CACHE_MS (most of them without evidence),
// so the miss is the common case: the server row by URL comes with its drift flag, MCP facts and
// registry listing (src/services/server-facts.ts), the score's inputs are one statement (totals,
// evidence, hourly rollups and stored score, src/store/score-inputs.ts), a computed score's writes
// one more. Before this a miss of an unrated server took 7 statements on /api/trust and 10 on
// /v1/preflight.
// Counted, not timed: every statement the service sends through its database handle while one
// request is answered (the rollup aggregator's and periodic jobs' own statements excluded).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db, Queryable } from '../src/db/index.js';
import { serverStore } from '../src/store/servers.js';
import { lookupUrlWithFacts } from '../src/services/server-facts.js';
import { apiKeyStore } from '../src/store/api-keys.js';
import { a2aTaskStore } from '../src/store/a2a-tasks.js';
import { receiptStore } from '../src/store/receipts.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';
import { countingDb, type StatementCounter } from './support/counting-db.js';

async function statementsOf(path: string): Promise<string[]> {
  return counter.during(async () => expect((await fetch(`${t.base}${path}`)).status).toBe(200));
}

let t: TestApp;
let tdb: TestDatabase;
let counter: StatementCounter<Db>;
let countedDb: Queryable;
const url = (i: number) => `https://lookup-${i}.example.com/mcp`;
const trust = (i: number) => `/api/trust?url=${encodeURIComponent(url(i))}`;
const preflight = (i: number) => `/v1/preflight?target=${encodeURIComponent(url(i))}`;

beforeAll(async () => {
  tdb = await createTestDatabase();
  counter = countingDb(tdb.db);
  const db = counter.db;
  countedDb = db;
  t = await startTestApp({}, { tdb: { ...tdb, db } });
  // Tracked servers of one category; the first ten with evidence.
  const servers = serverStore(db);
  for (let i = 0; i < 40; i++) await servers.ensure({ url: url(i), name: `lookup ${i}`, slug: `lookup-${i}`, category: 'search' }, new Date());
  for (let i = 0; i < 10; i++) {
    for (let k = 0; k < 3; k++) expect((await postJson(`${t.base}/api/report`, { server_url: url(i), success: true, latency_ms: 40 + k, tool_name: 'search' })).status).toBe(200);
  }
  // The category's baseline and the signing key are read once per process (or per SCORE_CACHE_MS), not per server.
  expect((await fetch(`${t.base}${trust(39)}`)).status).toBe(200);
  expect((await fetch(`${t.base}${preflight(38)}`)).status).toBe(200);
}, 120_000);
afterAll(async () => {
  await t?.close();
  await tdb?.drop();
});

describe(`one lookup that misses every cache (${backend})`, () => {
  it('GET /api/trust of a server without evidence: the server row with its side facts, then its score inputs', async () => {
    const sql = await statementsOf(trust(20));
    expect(sql, sql.join('\n')).toHaveLength(2);
  });

  it('GET /api/trust of a rated server: the same reads and one write of its computed score', async () => {
    const sql = await statementsOf(trust(1));
    expect(sql, sql.join('\n')).toHaveLength(3);
    expect(sql.filter((s) => s.includes('INSERT INTO server_scores'))).toHaveLength(1);
  });

  it('GET /v1/preflight of a server without evidence: the same reads and its receipt', async () => {
    const sql = await statementsOf(preflight(21));
    expect(sql, sql.join('\n')).toHaveLength(3);
    expect(sql.filter((s) => s.includes('INSERT'))).toEqual([expect.stringContaining('INSERT INTO receipts')]);
  });

  it('GET /v1/preflight of a rated server whose stored score is current: no computation, no score write', async () => {
    // Computed and stored by a trust read, then forgotten from memory (its cache bound).
    expect((await fetch(`${t.base}${trust(3)}`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 2100));
    const sql = await statementsOf(preflight(3));
    expect(sql, sql.join('\n')).toHaveLength(3);
    expect(sql.filter((s) => s.includes('INSERT'))).toEqual([expect.stringContaining('INSERT INTO receipts')]);
  });

  it('a second read within the cache bound sends nothing; a report in this process shows at once', async () => {
    // The category baseline is still fresh (BASELINE_CACHE_MS): a miss is its two statements.
    expect((await fetch(`${t.base}${trust(37)}`)).status).toBe(200);
    expect(await statementsOf(trust(22))).toHaveLength(2);
    expect(await statementsOf(trust(22))).toHaveLength(0);
    const before = await json(fetch(`${t.base}${trust(22)}`));
    expect(before.verdict).toBe('UNRATED');
    expect((await postJson(`${t.base}/api/report`, { server_url: url(22), success: true, latency_ms: 50, tool_name: 'search' })).status).toBe(200);
    const after = await json(fetch(`${t.base}${trust(22)}`));
    expect(after.metrics.totalInteractions ?? after.metrics.total_interactions).toBe(1);
    const pf = await json(fetch(`${t.base}${preflight(22)}`));
    expect(pf.total_interactions ?? pf.totalInteractions).toBe(1);
  });

  it("a category baseline's server count (one count of every category, shared) follows a new server reported in this process within AGGREGATE_SETTLE_MS", async () => {
    const a = 'https://fresh-a.example.net/mcp';
    const b = 'https://fresh-b.example.net/mcp';
    expect((await postJson(`${t.base}/api/report`, { server_url: a, success: true, latency_ms: 30 })).status).toBe(200);
    await aggregatesSettled();
    const first = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(a)}`));
    expect((await postJson(`${t.base}/api/report`, { server_url: b, success: true, latency_ms: 30 })).status).toBe(200);
    // The new server's own record shows its report at once; the category figures it states
    // (the baseline and its server count) follow within AGGREGATE_SETTLE_MS.
    const soon = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(b)}`));
    expect(soon.metrics.total_interactions).toBe(1);
    await aggregatesSettled();
    await postJson(`${t.base}/api/report`, { server_url: b, success: true, latency_ms: 30 });
    const other = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(b)}`));
    expect(other.server.category).toBe(first.server.category);
    expect(other.category_baseline.server_count).toBe(first.category_baseline.server_count + 1);
  });
});

// A look-up of a URL nobody tracks is a miss no cache can hold (a flood sends a different URL
// each time): before, each cost one statement of its own (parsed, planned and run in a backend
// woken for it), 0.4-0.5 ms of PostgreSQL CPU on this host, so one anonymous client with 50
// connections held the pool and tripled the latency of everyone's reports. The URLs asked in one
// event-loop turn now share one statement (src/store/per-turn.ts), which is also kept prepared.
describe(`look-ups of servers nobody tracks (${backend})`, () => {
  it('the URLs asked in one turn, tracked or not, are read in one statement, and each caller gets its own server or none', async () => {
    const asked = [...Array.from({ length: 40 }, (_, i) => `https://nobody-${i}.example.org/mcp`), url(30), url(31), url(30)];
    let rows: Awaited<ReturnType<typeof lookupUrlWithFacts>>[] = [];
    const sql = await counter.during(async () => (rows = await Promise.all(asked.map((u) => lookupUrlWithFacts(countedDb, u)))));
    expect(sql, sql.join('\n')).toHaveLength(1);
    expect(rows.slice(0, 40)).toEqual(Array(40).fill(null));
    expect(rows.slice(40).map((r) => r?.url)).toEqual([url(30), url(31), url(30)]);
  });

  it('concurrent trust reads of servers tracked and not each get their own answer', async () => {
    const asked = Array.from({ length: 30 }, (_, i) => (i % 3 === 0 ? url(32 + (i % 6)) : `https://nobody-http-${i}.example.org/mcp`));
    const answers = await Promise.all(asked.map(async (u) => {
      const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent(u)}`);
      return { status: res.status, type: res.headers.get('content-type'), body: (await res.json()) as { server?: { url?: string }; detail?: string } };
    }));
    answers.forEach((a, i) => {
      if (asked[i]!.includes('nobody')) {
        expect(a.status).toBe(404);
        expect(a.type).toMatch(/^application\/problem\+json/);
        expect(a.body.detail).toContain(asked[i]);
      } else {
        expect(a.status).toBe(200);
        expect(a.body.server?.url).toBe(asked[i]);
      }
    });
  });

  it('made-up receipt ids, API keys, A2A task ids, handles and URLs (a badge, a compliance export) asked in one turn cost one statement each', async () => {
    const many = <T>(n: number, f: (i: number) => T) => Array.from({ length: n }, (_, i) => f(i));
    let found: unknown[] = [];
    const sql = await counter.during(async () => {
      found = await Promise.all([
        ...many(20, (i) => receiptStore(countedDb).get(`${i}`.padStart(16, 'f'))),
        ...many(20, (i) => apiKeyStore(countedDb).byHash(`made-up-${i}`)),
        ...many(20, (i) => a2aTaskStore(countedDb).get(`task-${i}`)),
        ...many(20, (i) => serverStore(countedDb).resolve(`nobody-${i}`)),
        ...many(20, (i) => serverStore(countedDb).lookupUrl(`https://nobody-badge-${i}.example.org/mcp`)),
        serverStore(countedDb).resolve('lookup-33'),
        serverStore(countedDb).lookupUrl(url(35)),
      ]);
    });
    expect(sql, sql.join('\n')).toHaveLength(5);
    expect(found.slice(0, 100)).toEqual(Array(100).fill(null));
    expect((found[100] as { url?: string } | null)?.url).toBe(url(33));
    expect((found[101] as { url?: string } | null)?.url).toBe(url(35));
  });

  it('an id with NUL (text PostgreSQL cannot store) among them fails nobody: it is none, the others are read', async () => {
    const [nul, other, task, otherTask, server] = await Promise.all([
      receiptStore(countedDb).get('\u0000'.repeat(16)),
      receiptStore(countedDb).get('0123456789abcdef'),
      a2aTaskStore(countedDb).get('task\u0000id'),
      a2aTaskStore(countedDb).get('task-id'),
      serverStore(countedDb).resolve('lookup-34'),
    ]);
    expect([nul, other, task, otherTask]).toEqual([null, null, null, null]);
    expect(server?.url).toBe(url(34));
  });
});
