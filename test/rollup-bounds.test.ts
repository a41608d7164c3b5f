import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../src/db/postgres.js';
import { ObservatoryError } from '../src/errors.js';
import { rollupAggregator, settleRollups } from '../src/store/rollup-aggregator.js';
import { serverStore } from '../src/store/servers.js';
import { telemetryStore } from '../src/store/telemetry.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { within } from './support/within.js';
import { lockHolder } from './support/lock-holder.js';

// Audit finding 3: one instance paused (SIGSTOP) while its rollup pass held the aggregator's
// advisory lock froze trust reads and the leaderboard on every other instance for as long as it
// was paused: their pass waited on pg_advisory_xact_lock(7220001) without limit, holding a pooled
// connection, and settle() looped `while (covered < target) await pass()` with no deadline. Now
// the lock is tried (polled, no connection held waiting), and a read whose rollups are not
// settled within its bound is answered 503 with Retry-After. No timing assertion: each read must
// answer before a deadline far shorter than the hold, which the code before waits out.

describe(`a read waiting for the rollups has a deadline (${backend})`, () => {
  it('a pass that does not end (a stalled database) makes the settle a 503 with Retry-After, not a wait; once it ends the read settles', async () => {
    const tdb = await createTestDatabase();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let stall = true;
    try {
      // The hooks must be the handle's first aggregator: before any append.
      rollupAggregator(tdb.db, {
        settleMaxMs: 300,
        afterFold: async () => {
          if (stall) await held;
        },
      });
      const s = await serverStore(tdb.db).insertNew({ url: 'https://settle.example.com/mcp', name: 'settle', slug: 'settle', category: 'general' }, new Date());
      await telemetryStore(tdb.db).append([{ serverId: s!.id, at: new Date(), source: 'src', report: { server_url: 'https://settle.example.com/mcp', success: true, latency_ms: 5, tool_name: 't', http_status: 200 } }]);
      const err = await within(settleRollups(tdb.db, [s!.id]).then(() => null, (e: unknown) => e), 20_000, 'the settle');
      expect(err).toBeInstanceOf(ObservatoryError);
      expect((err as ObservatoryError).status).toBe(503);
      expect((err as ObservatoryError).headers['retry-after']).toMatch(/^\d+$/);
      stall = false;
      release();
      await within(settleRollups(tdb.db, [s!.id]), 20_000, 'the settle after the pass ended');
      const [row] = await tdb.db.query<{ n: number }>('SELECT n::int AS n FROM server_totals WHERE server_id = $1', [s!.id]);
      expect(row!.n).toBe(1);
    } finally {
      stall = false;
      release();
      await tdb.drop();
    }
  }, 120_000);
});

if (backend !== 'postgres') console.log("SKIP another instance holding the rollup lock: needs PostgreSQL (set DATABASE_URL); PGlite is one process, no other instance can hold it");

describe.skipIf(backend !== 'postgres')('another instance holds the rollup lock (PostgreSQL)', () => {
  let tdb: TestDatabase;
  let app: TestApp;
  const lock = lockHolder();
  const release = lock.release;
  const url = 'https://held-fold.example.com/mcp';

  beforeAll(async () => {
    tdb = await createTestDatabase();
    // Lock waits as long as the hold: what answers must be the aggregator's own bound, not
    // lock_timeout (absent behind a pooler that drops startup parameters, or set long).
    const db = openPostgres(tdb.url!, { timeouts: { statementTimeoutMs: 120_000, lockTimeoutMs: 120_000, idleInTransactionTimeoutMs: 120_000 } });
    app = await startTestApp({}, { tdb: { db, url: tdb.url, drop: async () => {} } });
    expect((await postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 10 })).status).toBe(200);
    expect((await fetch(`${app.base}/api/trust?url=${encodeURIComponent(url)}`)).status).toBe(200);
  }, 300_000);
  afterAll(async () => {
    await release();
    await app?.close().catch(() => {});
    await tdb?.drop();
  });

  it('a report then a read of its server: the read answers 503 with Retry-After while the lock is held (no pooled connection waits on it), and shows the report once it is released', async () => {
    await lock.hold(tdb.url!, 'SELECT pg_advisory_xact_lock(7220001)'); // a paused instance mid-pass
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: url, success: false, latency_ms: 30 })).status).toBe(200);
      const trust = await fetch(`${app.base}/api/trust?url=${encodeURIComponent(url)}`, { signal: AbortSignal.timeout(30_000) });
      const body = await expectProblem(trust, 503, 'unavailable');
      expect(trust.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(String(body.detail)).toMatch(/retry/);
      const board = await fetch(`${app.base}/api/leaderboard`, { signal: AbortSignal.timeout(30_000) });
      await expectProblem(board, 503, 'unavailable');
      // Nobody of the service's waits in the database for the lock (a paused peer cannot pin a pooled connection).
      const [w] = await tdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 7220001 AND NOT granted");
      expect(w!.n).toBe(0);
      await release();
      let res: Response | null = null;
      for (let i = 0; i < 50; i++) {
        res = await fetch(`${app.base}/api/trust?url=${encodeURIComponent(url)}`, { signal: AbortSignal.timeout(30_000) });
        if (res.status === 200) break;
        await res.arrayBuffer();
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(res!.status).toBe(200);
      expect((await json(res!)).metrics.total_interactions).toBe(2);
    } finally {
      await release();
    }
  }, 120_000);
});
