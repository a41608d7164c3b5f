import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../src/db/postgres.js';
import { ObservatoryError } from '../src/errors.js';
import { groupCommit, MAX_QUEUE_WAIT_MS, QUEUED_BATCHES } from '../src/store/group-commit.js';
import { callContext } from '../src/services/context.js';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { within } from './support/within.js';
import { lockHolder } from './support/lock-holder.js';

// Audit finding 2: the group-commit queues had no bound, no deadline and ignored callers that had
// gone. With the database silent, 400 clients reporting got no 503, RSS grew 157 -> 514 MB, and
// once the database answered again every abandoned report was committed (telemetry 19 -> 32,062):
// a client retrying after its timeout had created duplicate evidence. Now a full queue refuses at
// once, an item waits at most MAX_QUEUE_WAIT_MS for its write to begin, and an item whose caller
// left before its write began is never written. No timing assertion: a refusal must come while
// the write that blocks the queue is still held (the code before waits for its release).

const tick = () => new Promise<void>((r) => setImmediate(r));

/** A writer whose first write is held until released: the database stalled with a write in flight. */
function stalledWriter() {
  const written: number[] = [];
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let first = true;
  return {
    written,
    release: () => release(),
    async write(items: number[]) {
      if (first) {
        first = false;
        await held;
      }
      written.push(...items);
    },
  };
}

const refusal = (err: unknown) => {
  expect(err).toBeInstanceOf(ObservatoryError);
  const e = err as ObservatoryError;
  expect(e.status).toBe(503);
  expect(e.headers['retry-after']).toMatch(/^\d+$/);
  return e;
};

describe('group commit bounds (unit, a stalled writer)', () => {
  it('refuses at once, with 503 and Retry-After, what would pass the queue bound (QUEUED_BATCHES batches); the refused items are never written', async () => {
    const w = stalledWriter();
    const gc = groupCommit<number>({ write: (items) => w.write(items), maxItems: 4, maxWaitMs: 600_000 });
    const first = gc.submit([0]);
    await tick();
    await tick();
    const bound = QUEUED_BATCHES * 4;
    const queued = Array.from({ length: bound }, (_, i) => gc.submit([i + 1]));
    expect(gc.queued()).toBe(bound);
    // Still held: the next is refused now, not after the write.
    const over = await within(gc.submit([999]).then(() => null, (e: unknown) => e), 10_000, 'the refusal');
    expect(refusal(over).rawMessage).toMatch(/not keeping up/);
    // One caller's items are never split: a caller larger than the room left is refused too.
    refusal(await gc.submit([1000, 1001]).then(() => null, (e: unknown) => e));
    w.release();
    await Promise.all([first, ...queued]);
    expect(w.written.sort((a, b) => a - b)).toEqual(Array.from({ length: bound + 1 }, (_, i) => i));
    await gc.drain();
  });

  it('a caller larger than the bound is taken when nothing else waits (goes out alone)', async () => {
    const written: number[][] = [];
    const gc = groupCommit<number>({ write: async (items) => void written.push(items), maxItems: 2, maxQueuedItems: 4 });
    await gc.submit([1, 2, 3, 4, 5, 6]);
    expect(written).toEqual([[1, 2, 3, 4, 5, 6]]);
  });

  it('refuses an item whose write did not begin within maxWaitMs, while the write ahead of it is still held; it is never written', async () => {
    const w = stalledWriter();
    const gc = groupCommit<number>({ write: (items) => w.write(items), maxWaitMs: 50 });
    const first = gc.submit([1]);
    await tick();
    await tick();
    const late = gc.submit([2]).then(() => null, (e: unknown) => e);
    expect(refusal(await within(late, 10_000, 'the expiry')).rawMessage).toMatch(/did not take this item within 50 ms/);
    expect(gc.queued()).toBe(0);
    w.release();
    await first;
    await gc.drain();
    expect(w.written).toEqual([1]);
  });

  it('drops an item whose caller went away before its write began; an item already in a running write stays', async () => {
    const w = stalledWriter();
    const gc = groupCommit<number>({ write: (items) => w.write(items), maxWaitMs: 600_000 });
    const inFlight = { aborted: false };
    const first = gc.submit([1], inFlight);
    await tick();
    await tick();
    const goneA = { aborted: false };
    const a = gc.submit([2], goneA).then(() => null, (e: unknown) => e);
    const b = gc.submit([3], { aborted: false });
    const ac = new AbortController();
    const c = gc.submit([4], ac.signal).then(() => null, (e: unknown) => e);
    // The callers of 1 (in the running write), 2 and 4 (queued) leave.
    inFlight.aborted = true;
    goneA.aborted = true;
    ac.abort();
    w.release();
    await first; // began before its caller left: it commits (acknowledged-write contract)
    await b;
    expect(refusal(await a).rawMessage).toMatch(/abandoned/);
    refusal(await c);
    await gc.drain();
    expect(w.written.sort()).toEqual([1, 3]);
  });
});

describe('a REST call knows when its client went away (CallContext.signal)', () => {
  it('is false while the client waits and true once it closed the connection before the answer', async () => {
    const seen: boolean[] = [];
    let observed!: () => void;
    const done = new Promise<void>((r) => (observed = r));
    const server = http.createServer((req, res) => {
      req.resume();
      const ctx = callContext(req.headers, '127.0.0.1', res);
      seen.push(ctx.signal!.aborted);
      res.on('close', () => {
        seen.push(ctx.signal!.aborted);
        observed();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as import('node:net').AddressInfo).port;
      const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/', headers: { 'content-length': '2' } });
      req.on('error', () => {});
      req.end('{}');
      await new Promise((r) => setTimeout(r, 100));
      req.destroy();
      await within(done, 10_000, 'the close');
      expect(seen).toEqual([false, true]);
    } finally {
      server.close();
    }
  });
});

if (backend !== 'postgres') console.log('SKIP group-commit bounds over HTTP with a stalled telemetry insert: needs PostgreSQL (set DATABASE_URL) to hold a lock on telemetry from a second connection');

describe.skipIf(backend !== 'postgres')('reports while the telemetry insert is stalled by a lock (PostgreSQL)', () => {
  let tdb: TestDatabase;
  let app: TestApp;
  const lock = lockHolder();
  const release = lock.release;
  const url = 'https://stalled.example.com/mcp';
  const stored = async (tool: string) =>
    (await tdb.db.query<{ n: number }>('SELECT count(*)::int AS n FROM telemetry WHERE tool_name = $1', [tool]))[0]!.n;

  beforeAll(async () => {
    tdb = await createTestDatabase();
    // Long statement and lock bounds for this instance: the write in flight waits for the lock as
    // long as it is held, so what answers the queued reports is the queue's own bound.
    const db = openPostgres(tdb.url!, { timeouts: { statementTimeoutMs: 120_000, lockTimeoutMs: 120_000, idleInTransactionTimeoutMs: 120_000 } });
    app = await startTestApp({}, { tdb: { db, url: tdb.url, drop: async () => {} } });
    expect((await postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 10, tool_name: 'warm' })).status).toBe(200);
  }, 300_000);
  afterAll(async () => {
    await release();
    await app?.close().catch(() => {});
    await tdb?.drop();
  });

  it(`queued reports are answered 503 with Retry-After within the queue bound (${MAX_QUEUE_WAIT_MS} ms) while the write ahead of them is held; an abandoned one is never written; the one in flight commits`, async () => {
    await lock.hold(tdb.url!, 'LOCK TABLE telemetry IN SHARE MODE'); // INSERT (ROW EXCLUSIVE) waits
    try {
      // A: its write begins and waits on the lock.
      const a = postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 10, tool_name: 'in-flight' });
      for (let i = 0; i < 200; i++) {
        const [w] = await tdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO telemetry%'");
        if (w!.n > 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      // B: queued behind A, then its client leaves.
      const body = JSON.stringify({ server_url: url, success: true, latency_ms: 10, tool_name: 'abandoned' });
      const port = Number(new URL(app.base).port);
      const b = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/api/report', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
      b.on('error', () => {});
      b.end(body);
      // Twenty more, queued: each is refused within the queue bound, while A is still held.
      const queued = Array.from({ length: 20 }, (_, i) =>
        fetch(`${app.base}/api/report`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ server_url: url, success: true, latency_ms: 10, tool_name: `queued-${i}` }),
          signal: AbortSignal.timeout(30_000),
        }),
      );
      await new Promise((r) => setTimeout(r, 1000));
      b.destroy();
      for (const r of await Promise.all(queued)) {
        const p = await expectProblem(r, 503, 'unavailable');
        expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
        expect(String(p.detail)).toMatch(/not stored/);
      }
      await release();
      expect((await a).status).toBe(200); // began before the stall ended: committed, acknowledged
      expect(await stored('in-flight')).toBe(1);
      expect(await stored('abandoned')).toBe(0);
      for (let i = 0; i < 20; i++) expect(await stored(`queued-${i}`)).toBe(0);
      // The queue works again.
      expect((await postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 10, tool_name: 'after' })).status).toBe(200);
      expect(await stored('after')).toBe(1);
    } finally {
      await release();
    }
  }, 120_000);

  it('an OTLP export whose client leaves while its rows wait is not written; one whose client stays is', async () => {
    await lock.hold(tdb.url!, 'LOCK TABLE telemetry IN SHARE MODE');
    try {
      const a = postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 10, tool_name: 'otlp-case-in-flight' });
      for (let i = 0; i < 200; i++) {
        const [w] = await tdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO telemetry%'");
        if (w!.n > 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const exportOf = (tool: string, spanId: string) =>
        JSON.stringify({
          resourceSpans: [
            {
              resource: { attributes: [] },
              scopeSpans: [
                {
                  spans: [
                    {
                      traceId: '5B8EFFF798038103D269B633813FC60C',
                      spanId,
                      name: `tools/call ${tool}`,
                      kind: 3,
                      startTimeUnixNano: '1760000000000000000',
                      endTimeUnixNano: '1760000000010000000',
                      attributes: [
                        { key: 'mcp.method.name', value: { stringValue: 'tools/call' } },
                        { key: 'gen_ai.tool.name', value: { stringValue: tool } },
                        { key: 'url.full', value: { stringValue: url } },
                      ],
                    },
                  ],
                },
              ],
            },
          ],
        });
      const gone = exportOf('otlp-abandoned', 'EEE19B7EC3C1B174');
      const port = Number(new URL(app.base).port);
      const c = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/v1/traces', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(gone) } });
      c.on('error', () => {});
      c.end(gone);
      const staying = postJson(`${app.base}/v1/traces`, JSON.parse(exportOf('otlp-stayed', 'EEE19B7EC3C1B175')));
      await new Promise((r) => setTimeout(r, 800)); // both exports' rows are queued behind the held write
      c.destroy();
      await new Promise((r) => setTimeout(r, 300));
      await release(); // well within the queue's 5 s: what is dropped is dropped for its client leaving
      expect((await a).status).toBe(200);
      expect((await staying).status).toBe(200);
      expect(await stored('otlp-stayed')).toBe(1);
      expect(await stored('otlp-abandoned')).toBe(0);
    } finally {
      await release();
    }
  }, 120_000);
});
