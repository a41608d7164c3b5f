import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../src/db/postgres.js';
import { createObservationService, type ObservationService } from '../src/services/observation.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase, foldRollups } from './support/db.js';
import { startMcpTarget } from './support/mcp-target.js';

// Two service instances on one PostgreSQL observing together (issue 13 item 3): each claims due
// servers with FOR UPDATE SKIP LOCKED, so every server is probed exactly once per interval.

const T0 = new Date('2026-12-02T08:00:00Z');
let clock = T0;
const SERVERS = 12;

describe.skipIf(backend !== 'postgres')('two instances observing one PostgreSQL database', () => {
  let tdb: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  let observers: ObservationService[];
  let target: Awaited<ReturnType<typeof startMcpTarget>>;

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const own = () => ({ db: openPostgres(tdb.url!), url: tdb.url, drop: async () => {} });
    const env = { ALLOW_PRIVATE_TARGETS: '1', OBSERVE_INTERVAL_SECONDS: '60', OBSERVE_CONCURRENCY: '3', OBSERVE_RATE_PER_MINUTE: '1000' };
    a = await startTestApp(env, { tdb: own(), now: () => clock });
    b = await startTestApp(env, { tdb: own(), now: () => clock });
    target = await startMcpTarget([{ name: 'ping', inputSchema: { type: 'object' } }]);
    // Each instance's observer under its own instance name (as two processes would have).
    observers = [a, b].map((x, i) =>
      createObservationService(
        { db: x.obs.db, config: x.config, now: () => clock, keyring: x.obs.services.keyring, receipts: x.obs.services.receipts },
        { telemetry: x.obs.services.telemetry, drift: x.obs.services.drift },
        { instance: `instance-${'ab'[i]}` },
      ),
    );
    // The stand-in answers on every path under /mcp: twelve distinct servers, one socket.
    await a.obs.services.catalogue.importDocument({
      servers: Array.from({ length: SERVERS }, (_, i) => ({ server: { name: `io.github.multi/s${i}`, remotes: [{ type: 'streamable-http', url: `${target.url}/${i}` }] } })),
    });
  }, 120_000);
  afterAll(async () => {
    await Promise.all(observers?.map((o) => o.stop()) ?? []);
    await a?.close();
    await b?.close();
    await target?.close();
    await tdb?.drop();
  });

  it('probe every server once per interval between them', async () => {
    const [ra, rb] = await Promise.all(observers.map((o) => o.runRound()));
    expect(ra!.probed + rb!.probed).toBe(SERVERS);
    expect(target.initializations).toBe(SERVERS);
    const rows = await observers[0]!.schedule();
    expect(rows).toHaveLength(SERVERS);
    expect(rows.every((r) => r.probes === 1 && r.last_outcome === 'ok')).toBe(true);
    const urls = [...ra!.results, ...rb!.results].map((r) => r.url);
    expect(new Set(urls).size).toBe(SERVERS);

    // Within the interval neither probes again, however often they run.
    const again = await Promise.all([...observers, ...observers].map((o) => o.runRound()));
    expect(again.reduce((s, r) => s + r.probed, 0)).toBe(0);

    // Next interval: again exactly once each.
    clock = new Date(T0.getTime() + 60_000);
    const next = await Promise.all(observers.map((o) => o.runRound()));
    expect(next.reduce((s, r) => s + r.probed, 0)).toBe(SERVERS);
    expect(target.initializations).toBe(2 * SERVERS);
    expect((await observers[1]!.schedule()).every((r) => r.probes === 2)).toBe(true);
    await foldRollups(tdb.db);
    const [hourly] = await tdb.db.query<{ n: number }>("SELECT count(*)::int8 AS n FROM telemetry_hourly WHERE source = 'observatory:probe'");
    expect(hourly!.n).toBe(SERVERS);
  });

  it('share one per-minute budget', async () => {
    clock = new Date(T0.getTime() + 10 * 60_000);
    const small = [a, b].map((x, i) =>
      createObservationService(
        { db: x.obs.db, config: { ...x.config, observe: { ...x.config.observe, ratePerMinute: 5 } }, now: () => clock, keyring: x.obs.services.keyring, receipts: x.obs.services.receipts },
        { telemetry: x.obs.services.telemetry, drift: x.obs.services.drift },
        { instance: `small-${i}` },
      ),
    );
    const rounds = await Promise.all(small.map((o) => o.runRound()));
    expect(rounds.reduce((s, r) => s + r.probed, 0)).toBe(5);
  });
});

if (backend !== 'postgres') console.log('SKIP two-instance observation test (each server probed once per interval across instances): needs PostgreSQL (set DATABASE_URL); PGlite is single-process');
