import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { migrate } from '../src/db/migrate.js';
import { openPglite } from '../src/db/pglite.js';
import { openPostgres } from '../src/db/postgres.js';
import { createScratchDatabase } from '../src/db/scratch.js';
import type { Db } from '../src/db/index.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { startMcpTarget } from './support/mcp-target.js';
import { within } from './support/within.js';

// Issue 17 finding 1: a statement sent through the outer database handle from inside an open
// transaction froze the embedded database for good (recordBaseline signed the drift receipt inside
// its transaction, and a stale key ring re-read the keys through the outer handle). PGlite has one
// connection; PostgreSQL is run here with a pool of one connection, where the same mistake waits
// the same way (until the pool's connect timeout).

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The backend's database with exactly one connection (PGlite always; PostgreSQL through a pool of one). */
async function singleConnection(): Promise<TestDatabase> {
  if (backend === 'pglite') return createTestDatabase();
  const scratch = await createScratchDatabase(process.env.DATABASE_URL!, 'obs_test');
  // A long connect timeout: waiting for the one connection is normal here, only a cycle is not.
  const db = openPostgres(scratch.url, { max: 1, connectionTimeoutMillis: 30_000 });
  await migrate(db);
  return {
    db,
    url: scratch.url,
    async drop() {
      await db.close();
      await scratch.drop();
    },
  };
}

const tool = (name: string, description: string): Tool => ({ name, description, inputSchema: { type: 'object', properties: {} } });

describe(`a drift baseline signed inside its transaction after a key ring reload (${backend}, one connection)`, () => {
  let t: TestApp;
  let tdb: TestDatabase;
  let target: Awaited<ReturnType<typeof startMcpTarget>>;
  beforeAll(async () => {
    tdb = await singleConnection();
    t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' }, { tdb });
    target = await startMcpTarget([tool('forecast', 'Weather forecast'), tool('alerts', 'Weather alerts')]);
    expect((await postJson(`${t.base}/api/report`, { server_url: target.url, success: true, latency_ms: 40 })).status).toBe(200);
  }, 180_000);
  afterAll(async () => {
    await target?.close();
    await t?.close().catch(() => {});
    await tdb?.drop().catch(() => {});
  });

  it('records the changed manifest, and the database keeps answering afterwards', async () => {
    const drift = () => fetch(`${t.base}/api/drift?server=${encodeURIComponent(target.url)}`, { signal: AbortSignal.timeout(90_000) });
    const first = await drift();
    expect(first.status).toBe(200);
    // The observed server changes its tools, and the key ring's view of the keys is out of date
    // (what 30 s of age did with default settings): the next baseline is signed in its transaction.
    target.setTools([tool('forecast', 'Weather forecast, now hourly'), tool('alerts', 'Weather alerts'), tool('radar', 'Radar images')]);
    void t.obs.services.keyring.refresh();
    const second = await within(drift(), 100_000, 'GET /api/drift after a key ring reload');
    expect(second.status).toBe(200);
    const body = await json(second);
    expect(body.drift_detected).toBe(true);
    // Nothing is left waiting: the database answers and the process is live.
    expect((await within(fetch(`${t.base}/readyz`), 30_000, '/readyz')).status).toBe(200);
    expect((await within(fetch(`${t.base}/healthz`), 30_000, '/healthz')).status).toBe(200);
    const trust = await within(fetch(`${t.base}/api/trust?url=${encodeURIComponent(target.url)}`), 30_000, 'a trust lookup');
    expect(trust.status).toBe(200);
  }, 300_000);
});

describe(`the transaction guard (${backend})`, () => {
  let tdb: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    db = tdb.db;
  }, 120_000);
  afterAll(async () => {
    await tdb?.drop().catch(() => {});
  });

  it('refuses a statement through the outer handle from inside a transaction, with a clear error instead of a hang', async () => {
    const misuse = db.transaction(async (tx) => {
      await tx.query('SELECT 1');
      return db.query('SELECT 2');
    });
    await expect(within(misuse, 20_000, 'an outer query inside a transaction')).rejects.toThrow(/outer database handle from inside an open transaction/);
    const nested = db.transaction(async () => db.transaction(async (inner) => inner.query('SELECT 3')));
    await expect(within(nested, 20_000, 'a nested transaction through the outer handle')).rejects.toThrow(/outer database handle from inside an open transaction/);
    const script = db.transaction(async () => db.exec('SELECT 4'));
    await expect(within(script, 20_000, 'an outer script inside a transaction')).rejects.toThrow(/outer database handle/);
    // The database is not left waiting, and was rolled back.
    expect(await within(db.query<{ n: number }>('SELECT 5 AS n'), 20_000, 'a query after the refusals')).toEqual([{ n: 5 }]);
  }, 120_000);

  it('lets work that started inside a transaction use the outer handle once the transaction is over', async () => {
    const gate = deferred();
    let later: Promise<{ n: number }[]> | null = null;
    await db.transaction(async (tx) => {
      await tx.query('SELECT 1');
      later = gate.promise.then(() => db.query<{ n: number }>('SELECT 6 AS n'));
    });
    gate.resolve();
    expect(await within(later!, 20_000, 'a query after the transaction')).toEqual([{ n: 6 }]);
  });
});

if (backend !== 'pglite') {
  console.log('SKIP PGlite stall watchdog and /healthz liveness tests: PostgreSQL has its own connections (a pool that times out waiting ones), and its /healthz stays process-only by design (an unreachable PostgreSQL is /readyz)');
}

describe.runIf(backend === 'pglite')('the embedded database stall watchdog (pglite)', () => {
  it('rolls back a transaction that waits on a statement queued behind it, and the database answers again', async () => {
    const db = await openPglite(null, { stallAfterMs: 300 });
    try {
      const txStarted = deferred();
      const outerDone = deferred<unknown>();
      // The transaction waits for a statement issued outside it (a shared promise, out of the
      // guard's sight); that statement waits for the transaction: the cycle of finding 1.
      const tx = db.transaction(async (t) => {
        await t.query('SELECT 1');
        txStarted.resolve();
        await outerDone.promise;
        return t.query('SELECT 2');
      });
      tx.catch(() => {});
      await within(txStarted.promise, 20_000, 'the transaction start');
      const outer = db.query<{ n: number }>('SELECT 42 AS n');
      outer.then(outerDone.resolve, outerDone.reject);
      await expect(within(tx, 30_000, 'a self-deadlocked transaction')).rejects.toThrow(/self-deadlock/);
      expect(await within(outer, 30_000, 'the statement it waited for')).toEqual([{ n: 42 }]);
      expect(await within(db.query<{ n: number }>('SELECT 7 AS n'), 30_000, 'a later query')).toEqual([{ n: 7 }]);
    } finally {
      await db.close();
    }
  }, 120_000);
});

describe.runIf(backend === 'pglite')('/healthz with a wedged embedded database (pglite)', () => {
  it('answers 503 while no statement finishes, and 200 again once the database moves', async () => {
    // Watchdog off, so the wedge stays; the liveness probe gives up after 300 ms.
    const db = await openPglite(null, { stallAfterMs: 0, livenessTimeoutMs: 300 });
    await migrate(db);
    const t = await startTestApp({}, { tdb: { db, url: null, drop: () => db.close() } });
    const release = deferred();
    try {
      expect((await fetch(`${t.base}/healthz`)).status).toBe(200);
      const txStarted = deferred();
      const stuck = db.transaction(async (tx) => {
        await tx.query('SELECT 1');
        txStarted.resolve();
        await release.promise; // holds the only connection and runs nothing
      });
      await within(txStarted.promise, 20_000, 'the holding transaction');
      const waiting = db.query('SELECT 1');
      const health = await within(fetch(`${t.base}/healthz`), 30_000, '/healthz on a wedged database');
      const problem = await expectProblem(health, 503, 'unavailable');
      expect(String(problem.detail)).toMatch(/embedded database has finished no statement/);
      await expectProblem(await within(fetch(`${t.base}/readyz`), 30_000, '/readyz on a wedged database'), 503, 'unavailable');
      release.resolve();
      await within(stuck, 30_000, 'the released transaction');
      await within(waiting, 30_000, 'the statement that waited');
      expect((await within(fetch(`${t.base}/healthz`), 30_000, '/healthz after release')).status).toBe(200);
    } finally {
      release.resolve();
      await t.close();
    }
  }, 180_000);
});
