import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { periodicJob } from '../src/services/jobs.js';
import { jobRunStore } from '../src/store/job-runs.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

// Audit finding 6: a periodic job claimed each new period on its timer without looking whether
// the previous run still ran: with a 300 ms period and a 1 s run, up to four runs of one job at
// once in one process, and the same across instances. Now a tick is skipped while this process
// runs the job, and a period is not claimed while another instance's run is unfinished with a live
// lease. The tests count runs in progress at once (it must never exceed one); no timing assertion.

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
}

describe(`a periodic job never overlaps itself (${backend})`, () => {
  let tdb: TestDatabase;
  beforeAll(async () => {
    tdb = await createTestDatabase();
  }, 300_000);
  afterAll(async () => {
    await tdb?.drop();
  });

  it('in one process: ticks while a run lasts longer than the period are skipped (real timer, 50 ms period, runs of 400 ms)', async () => {
    let running = 0;
    let most = 0;
    let runs = 0;
    const errors: unknown[] = [];
    const job = periodicJob(
      tdb.db,
      'registry-sync',
      50,
      () => new Date(),
      async () => {
        runs++;
        running++;
        most = Math.max(most, running);
        await new Promise((r) => setTimeout(r, 400)); // a slow registry
        running--;
      },
      { onError: (e) => errors.push(e) },
    );
    try {
      // Long enough for many ticks during each run, and for at least two runs.
      while (runs < 2) await new Promise((r) => setTimeout(r, 100));
      await new Promise((r) => setTimeout(r, 600));
    } finally {
      job.stop();
    }
    while (running > 0) await new Promise((r) => setTimeout(r, 50));
    expect(errors).toEqual([]);
    expect(runs).toBeGreaterThanOrEqual(2);
    expect(most).toBe(1);
  }, 120_000);

  it("across instances: the next period is not claimed while another instance's run is still running; it is once that run ended", async () => {
    const runsOf: string[] = [];
    let running = 0;
    let most = 0;
    const g = gate();
    const mk = (instance: string) =>
      periodicJob(
        tdb.db,
        'drift-storage',
        60_000,
        () => new Date(0),
        async (at) => {
          runsOf.push(`${instance}@${at.toISOString()}`);
          running++;
          most = Math.max(most, running);
          if (instance === 'x') await g.opened;
          running--;
        },
        { instance },
      );
    const [x, y] = [mk('x'), mk('y')];
    x.stop();
    y.stop();
    const xRun = x.tick(new Date('2026-11-28T10:00:30Z')); // x runs the 10:00 period, and runs on
    while (runsOf.length === 0) await new Promise((r) => setTimeout(r, 10));
    expect(await y.tick(new Date('2026-11-28T10:01:10Z'))).toBe(false); // the 10:01 period: x still runs
    expect(await y.tick(new Date('2026-11-28T10:02:10Z'))).toBe(false);
    expect(await x.tick(new Date('2026-11-28T10:03:10Z'))).toBe(false); // x itself, while running
    g.open();
    expect(await xRun).toBe(true);
    expect(await y.tick(new Date('2026-11-28T10:04:10Z'))).toBe(true);
    expect(runsOf).toEqual(['x@2026-11-28T10:00:30.000Z', 'y@2026-11-28T10:04:10.000Z']);
    expect(most).toBe(1);
  }, 120_000);

  it('a run whose instance died (never finished, lease expired) does not hold the job; a live run keeps its lease renewed', async () => {
    const store = jobRunStore(tdb.db);
    // An instance claimed 11:00 with a lease of 1 ms and died: nothing finishes it.
    expect(await store.claim('receipt-retention', 72_620_106, new Date('2026-11-28T11:00:00Z'), 'dead', 1)).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
    let ran = 0;
    const job = periodicJob(tdb.db, 'receipt-retention', 60_000, () => new Date(0), async () => void ran++, { instance: 'alive' });
    job.stop();
    expect(await job.tick(new Date('2026-11-28T11:01:00Z'))).toBe(true);
    expect(ran).toBe(1);

    // A run lasting several leases: renewed every third of the lease, it keeps the job.
    const g = gate();
    let started = false;
    const long = periodicJob(
      tdb.db,
      'demand-retention',
      60_000,
      () => new Date(0),
      async () => {
        started = true;
        await g.opened;
      },
      { instance: 'long', leaseMs: 1500 },
    );
    const other = periodicJob(tdb.db, 'demand-retention', 60_000, () => new Date(0), async () => undefined, { instance: 'other', leaseMs: 1500 });
    long.stop();
    other.stop();
    const run = long.tick(new Date('2026-11-28T12:00:00Z'));
    while (!started) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 4000)); // more than two leases
    expect(await other.tick(new Date('2026-11-28T12:01:00Z'))).toBe(false);
    g.open();
    expect(await run).toBe(true);
    expect(await other.tick(new Date('2026-11-28T12:02:00Z'))).toBe(true);
  }, 120_000);
});
