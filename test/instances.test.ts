import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, listMigrations } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { jobRunStore } from '../src/store/job-runs.js';
import { SNAPSHOT_INTERVAL_MS } from '../src/services/trust.js';
import { periodicJob } from '../src/services/jobs.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

// Several instances on one PostgreSQL (issue 11 item 5): two createObservatory instances, each with
// its own connection pool, exactly like two processes behind a load balancer.

const T0 = new Date('2026-11-25T12:00:00Z');

describe(`periodic jobs (${backend})`, () => {
  it('run once per period per database, whichever instance ticks', async () => {
    const tdb = await createTestDatabase();
    try {
      const ran: string[] = [];
      const job = (instance: string) => periodicJob(tdb.db, 'trust-score-refresh', 60_000, () => T0, async (at) => void ran.push(`${instance}@${at.toISOString()}`), { instance });
      const [x, y] = [job('x'), job('y')];
      x.stop();
      y.stop();
      expect(await x.tick(new Date('2026-11-25T12:00:10Z'))).toBe(true);
      expect(await y.tick(new Date('2026-11-25T12:00:50Z'))).toBe(false);
      expect(await y.tick(new Date('2026-11-25T12:01:00Z'))).toBe(true);
      expect(ran).toEqual(['x@2026-11-25T12:00:10.000Z', 'y@2026-11-25T12:01:00.000Z']);
      expect((await jobRunStore(tdb.db).runs('trust-score-refresh')).map((r) => r.instance)).toEqual(['x', 'y']);
    } finally {
      await tdb.drop();
    }
  }, 120_000);
});

describe.skipIf(backend !== 'postgres')('two instances on one PostgreSQL database', () => {
  let tdb: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  let applied: string[][];

  beforeAll(async () => {
    tdb = await createTestDatabase({ migrate: false });
    const own = () => ({ db: openPostgres(tdb.url!), url: tdb.url, drop: async () => {} });
    const [da, dbb] = [own(), own()];
    // Both instances start together: each runs migrate(); the advisory lock makes one apply all.
    applied = await Promise.all([migrate(da.db), migrate(dbb.db)]);
    a = await startTestApp({ TRUST_PROXY: '1' }, { tdb: da, now: () => T0 });
    b = await startTestApp({ TRUST_PROXY: '1' }, { tdb: dbb, now: () => T0 });
    await postJson(`${a.base}/api/report`, { server_url: 'https://inst.example.com/mcp', success: true, latency_ms: 40 });
  }, 120_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await tdb?.drop();
  });

  it('apply every migration exactly once', async () => {
    const all = listMigrations().map((m) => m.name);
    expect([...applied[0]!, ...applied[1]!].sort()).toEqual(all);
    expect(applied.some((x) => x.length === 0)).toBe(true);
    const rows = await tdb.db.query<{ n: number }>('SELECT count(*)::int AS n FROM schema_migrations');
    expect(rows[0]!.n).toBe(all.length);
  });

  it('verify each other\'s receipts (/v1/verify and /v1/receipt)', async () => {
    for (const [issuer, verifier] of [
      [a, b],
      [b, a],
    ] as const) {
      const pf = await json(fetch(`${issuer.base}/v1/preflight?target=https://inst.example.com/mcp`));
      expect(pf.receipt_id).toBeTruthy();
      const v = await fetch(`${verifier.base}/v1/verify?jws=${pf.diligence_receipt}`);
      expect(v.status).toBe(200);
      expect((await json(v)).payload).toMatchObject({ jti: pf.receipt_id });
      const stored = await json(fetch(`${verifier.base}/v1/receipt/${pf.receipt_id}`));
      expect(stored.verification).toMatchObject({ valid: true });
    }
    // One key ring: both publish the same JWKS.
    expect(await json(fetch(`${a.base}/.well-known/jwks.json`))).toEqual(await json(fetch(`${b.base}/.well-known/jwks.json`)));
  });

  it('share the registration limit (5 per address per hour across both)', async () => {
    const reg = (app: TestApp) =>
      postJson(`${app.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': '198.51.100.211' }).then((r) => r.status);
    const statuses = await Promise.all([a, b, a, b, a, b, a].map(reg));
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(2);
  });

  it('run the periodic score refresh once per period across instances', async () => {
    const jobs = [a, b].map((x) => x.obs.services.trust.snapshotJob);
    // Both instances tick in the same 10-minute period, concurrently and then again: one run.
    const p1 = new Date('2026-11-25T12:01:00Z');
    const first = await Promise.all([jobs[0]!.tick(p1), jobs[1]!.tick(p1), jobs[1]!.tick(new Date(p1.getTime() + 60_000))]);
    expect(first.filter(Boolean)).toHaveLength(1);
    expect(await jobs[0]!.tick(new Date(p1.getTime() + 5 * 60_000))).toBe(false);
    // The next period: again exactly one of them.
    const p2 = new Date(p1.getTime() + SNAPSHOT_INTERVAL_MS);
    const second = await Promise.all([jobs[1]!.tick(p2), jobs[0]!.tick(p2)]);
    expect(second.filter(Boolean)).toHaveLength(1);
    const runs = await jobRunStore(tdb.db).runs('trust-score-refresh');
    expect(runs.map((r) => r.period_start.toISOString())).toEqual(['2026-11-25T12:00:00.000Z', '2026-11-25T12:10:00.000Z']);
  });

  it('keep rate-limit buckets per instance (documented: N instances allow N times the limit)', async () => {
    const hit = (app: TestApp) => fetch(`${app.base}/v1/preflight?target=https://inst.example.com/mcp`, { headers: { 'x-forwarded-for': '198.51.100.212' } });
    const ra = await hit(a);
    const rb = await hit(b);
    const remaining = (r: Response) => Number(/r=(\d+)/.exec(r.headers.get('ratelimit') ?? '')?.[1]);
    expect(remaining(ra)).toBe(remaining(rb));
  });
});

if (backend !== 'postgres') console.log('SKIP two-instance test (migrations once, receipts across instances, shared limits, jobs once per period): needs PostgreSQL (set DATABASE_URL); PGlite is single-process');
