// What a report on a server nobody tracks costs once its source may track no more this hour
// (NEW_SERVERS_PER_SOURCE_PER_HOUR, docs/integrity.md). Each such report used to run the whole
// creation transaction again (the look-up, BEGIN, the family's advisory lock, the window's SELECT,
// ROLLBACK) to be refused: one OTLP export of 40,000 spans naming 40,000 URLs (114 KB gzipped)
// was about 200,000 statements in a row, under one advisory lock, the embedded database's one
// connection held throughout. A refusal holds until its Retry-After (the window only empties as
// time passes), so it is remembered until then; and an export's reports are prepared in groups,
// so their look-ups share a statement per group (src/store/per-turn.ts).
// Counted, not timed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/db/index.js';
import { callContext } from '../src/services/context.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { countingDb, type StatementCounter } from './support/counting-db.js';

let t: TestApp;
let tdb: TestDatabase;
let counter: StatementCounter<Db>;

beforeAll(async () => {
  tdb = await createTestDatabase();
  counter = countingDb(tdb.db);
  t = await startTestApp({ TRUST_PROXY: '1', NEW_SERVERS_PER_SOURCE_PER_HOUR: '3' }, { tdb: { ...tdb, db: counter.db } });
}, 120_000);
afterAll(async () => {
  await t?.close();
  await tdb?.drop();
});

describe(`reports on new servers past the source's hourly allowance (${backend})`, () => {
  it('one export naming 1,000 new URLs: 3 tracked, the rest refused at the cost of a few statements, not thousands', async () => {
    const inputs = Array.from({ length: 1000 }, (_, i) => ({ serverUrl: `https://flood-${i}.example.net/mcp`, success: true, latencyMs: 40, toolName: 'search' }));
    let result: { accepted: number; rejected: number; ok: boolean[] } | undefined;
    const sql = await counter.during(async () => (result = await t.obs.services.telemetry.reportMany(inputs, callContext({}, '198.51.100.9'))));
    expect(result).toMatchObject({ accepted: 3, rejected: 997 });
    expect(result!.ok.slice(0, 3)).toEqual([true, true, true]);
    // Before: about 2 counted statements per refused URL (its look-up and the window's SELECT).
    const kinds = new Map<string, number>();
    for (const q of sql) kinds.set(q.slice(0, 60), (kinds.get(q.slice(0, 60)) ?? 0) + 1);
    expect(sql.length, JSON.stringify([...kinds])).toBeLessThan(60);
  });

  it('the remembered refusal is the same 429 for single reports, with its Retry-After, and other sources are not affected', async () => {
    const res = await postJson(`${t.base}/api/report`, { server_url: 'https://flood-single.example.net/mcp', success: true, latency_ms: 40 }, { 'x-forwarded-for': '198.51.100.9' });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await json(res)).detail).toMatch(/at most 3 new servers per hour/);
    // Reports on tracked servers are accepted.
    expect((await postJson(`${t.base}/api/report`, { server_url: 'https://flood-0.example.net/mcp', success: true, latency_ms: 40 }, { 'x-forwarded-for': '198.51.100.9' })).status).toBe(200);
    expect((await postJson(`${t.base}/api/report`, { server_url: 'https://flood-other.example.net/mcp', success: true, latency_ms: 40 }, { 'x-forwarded-for': '198.51.100.10' })).status).toBe(200);
  });
});
