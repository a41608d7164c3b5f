import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { openDatabase, type Db } from '../src/db/index.js';
import { openPostgres } from '../src/db/postgres.js';
import type { ReadRouter } from '../src/db/replica.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { replicaSkipReason, startPrimaryWithReplica, type PgPair } from './support/pg-cluster.js';

// DATABASE_READ_URL (issue 23 item 4) against a real streaming replica: the test starts its own
// primary and a pg_basebackup copy of it streaming on another port, runs the service on them, and
// pauses the replica's replay (falling behind) and stops it (going away).

const skip = replicaSkipReason();
if (skip) console.log(`skipping read-replica tests: ${skip}`);

const MAX_LAG_MS = 1000;

async function waitFor(what: string, fn: () => Promise<boolean> | boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('DATABASE_READ_URL settings', () => {
  it('the config refuses DATABASE_READ_URL without DATABASE_URL, or one that is not postgres', () => {
    expect(() => loadConfig({ DATABASE_READ_URL: 'postgres://x/y' })).toThrow(/DATABASE_READ_URL.*needs DATABASE_URL/);
    expect(() => loadConfig({ DATABASE_URL: 'postgres://x/y', DATABASE_READ_URL: 'mysql://x/y' })).toThrow(/DATABASE_READ_URL/);
    expect(() => loadConfig({ DATABASE_URL: 'postgres://x/y', DATABASE_READ_MAX_LAG_MS: '5' })).toThrow(/DATABASE_READ_MAX_LAG_MS/);
  });

});

describe.skipIf(skip !== null)('read replica (DATABASE_READ_URL, real streaming replica)', () => {
  let pair: PgPair;
  let db: Db;
  let router: ReadRouter;
  let onReplica: Db;
  let app: TestApp;
  const board = async () => JSON.stringify(await json(fetch(`${app.base}/api/leaderboard`)));
  const urlA = 'https://replica-a.example.com/mcp';
  const urlB = 'https://replica-b.example.com/mcp';
  const replicaHas = async (url: string) => (await onReplica.query<{ n: number }>('SELECT count(*)::int AS n FROM servers WHERE url = $1', [url]))[0]!.n > 0;

  beforeAll(async () => {
    pair = await startPrimaryWithReplica();
    db = await openDatabase({ databaseUrl: pair.primaryUrl, databaseReadUrl: pair.replicaUrl, databaseReadMaxLagMs: MAX_LAG_MS, dataDir: '' });
    router = db.staleReads as ReadRouter;
    onReplica = openPostgres(pair.replicaUrl, { guard: false });
    app = await startTestApp({}, { tdb: { db, url: pair.primaryUrl, drop: async () => {} } });
  }, 300_000);
  afterAll(async () => {
    // The clusters are stopped and removed whatever else fails.
    await app?.close().catch(() => {}); // closes db (both pools)
    await onReplica?.close().catch(() => {});
    await pair?.close();
  });

  it('reads that tolerate staleness go to the replica once it has caught up', async () => {
    expect((await postJson(`${app.base}/api/report`, { server_url: urlA, success: true, latency_ms: 40 })).status).toBe(200);
    await waitFor('the replica to replay the report', () => replicaHas(urlA));
    // The first list computes A's score and reads it back from the primary (read-your-writes).
    expect(await board()).toContain(urlA);
    await waitFor('the replica to replay the score', async () => (await onReplica.query('SELECT 1 FROM server_scores')).length > 0);
    await waitFor('the router to serve from the replica', () => router.state().serving);
    await new Promise((r) => setTimeout(r, 2100)); // past the in-memory ranked cache
    const before = router.counts();
    expect(await board()).toContain(urlA);
    // A ranked list older than 2 s is served while one refresh runs in the background (issue 23,
    // RANKED_STALE_MS): that refresh is the read that goes to the replica.
    await waitFor('the ranked list to be read from the replica', () => router.counts().replica > before.replica);
    expect(router.state()).toMatchObject({ reachable: true, serving: true, reason: null });
    expect(router.state().lagMs).toBeLessThanOrEqual(MAX_LAG_MS);
  });

  it('a replica that falls behind: writes and read-your-writes stay on the primary, other reads leave the replica at the bound', async () => {
    await onReplica.query('SELECT pg_wal_replay_pause()');
    await waitFor('replay to pause', async () => (await onReplica.query<{ s: string }>('SELECT pg_get_wal_replay_pause_state() AS s'))[0]!.s === 'paused');
    expect((await postJson(`${app.base}/api/report`, { server_url: urlB, success: false, latency_ms: 900 })).status).toBe(200);
    // The trust record reads the primary: the report shows at once, although the replica lacks it.
    const t = await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(urlB)}`));
    expect(t.metrics.total_interactions).toBe(1);
    expect(await replicaHas(urlB)).toBe(false);
    // Past the bound the replica no longer serves: the leaderboard comes from the primary and has B.
    await waitFor('the router to see the lag', () => !router.state().serving);
    expect(router.state().reason).toMatch(/lagging \d+ ms behind \(bound 1000 ms\)/);
    const before = router.counts();
    expect(await board()).toContain(urlB);
    expect(router.counts().replica).toBe(before.replica);
    expect(router.counts().primary).toBeGreaterThan(before.primary);
    expect(await replicaHas(urlB)).toBe(false);

    await onReplica.query('SELECT pg_wal_replay_resume()');
    await waitFor('the replica to catch up and serve again', () => router.state().serving);
    expect(await replicaHas(urlB)).toBe(true);
    const again = router.counts();
    await new Promise((r) => setTimeout(r, 2100)); // past the in-memory ranked cache
    expect(await board()).toContain(urlB);
    await waitFor('the ranked list to be read from the replica again', () => router.counts().replica > again.replica);
  });

  it('a replica that goes away: reads fall back to the primary at once, and it serves again when back', async () => {
    await onReplica.close();
    await pair.stopReplica();
    // The first read finds it gone (connection refused) and runs on the primary in the same call.
    const rows = await router.query<{ n: number }>('SELECT count(*)::int AS n FROM servers WHERE url IN ($1, $2)', [urlA, urlB]);
    expect(rows[0]!.n).toBe(2);
    expect(router.state()).toMatchObject({ reachable: false, serving: false });
    expect(router.state().reason).toMatch(/unreachable/);
    const res = await fetch(`${app.base}/api/leaderboard`);
    expect(res.status).toBe(200);
    expect(JSON.stringify(await res.json())).toContain(urlA);
    expect((await fetch(`${app.base}/api/stats`)).status).toBe(200);
    expect((await fetch(`${app.base}/atlas/report`)).status).toBe(200);

    await pair.startReplica();
    await waitFor('the restarted replica to serve again', () => router.state().serving);
    onReplica = openPostgres(pair.replicaUrl, { guard: false });
  });
});
