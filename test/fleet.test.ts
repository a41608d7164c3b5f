import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFleet, type Fleet } from '../scripts/fleet-sim.js';
import { startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// The loopback fleet simulator (scripts/fleet-sim.ts) under the real observation scheduler
// (issue 23 item 3), at a size a test can afford: 30 SDK v2 servers on one process over two
// ports, some legacy-only (2025 initialize), some dead, one whose manifest changes. Loopback
// targets need ALLOW_PRIVATE_TARGETS=1, as in test/observation.test.ts. Rounds are driven with an
// injected clock and a per-minute budget smaller than the fleet, to check fairness: oldest due
// first, nobody probed twice while another server still waits for its first probe.

const N = 30;
const BUDGET = 12;
const T0 = new Date('2026-12-02T10:00:00Z');
let clock = T0;

let fleet: Fleet;
let t: TestApp;

beforeAll(async () => {
  fleet = await startFleet({ servers: N, ports: 2, legacyShare: 0.4, deadShare: 0.1, seed: 7 });
  t = await startTestApp(
    { ALLOW_PRIVATE_TARGETS: '1', OBSERVE_INTERVAL_SECONDS: '60', OBSERVE_TIMEOUT_MS: '20000', OBSERVE_CONCURRENCY: '4', OBSERVE_RATE_PER_MINUTE: String(BUDGET) },
    { now: () => clock },
  );
  const s = await t.obs.services.catalogue.importDocument(fleet.registryDocument());
  expect(s.added).toBe(N);
}, 300_000);
afterAll(async () => {
  await t?.close();
  await fleet?.close();
});

describe(`fleet simulator under the observation scheduler (${backend})`, () => {
  it('serves distinct servers on paths over several ports, in both eras, some dead', () => {
    expect(new Set(fleet.urls).size).toBe(N);
    expect(new Set(fleet.urls.map((u) => new URL(u).port)).size).toBe(2);
    const profiles = fleet.urls.map((_, i) => fleet.profile(i));
    expect(profiles.some((p) => p.legacy) && profiles.some((p) => !p.legacy)).toBe(true);
    expect(profiles.some((p) => p.dead)).toBe(true);
  });

  it('covers the fleet oldest-due first within the budget: no second probe before every first one', async () => {
    const order: string[][] = [];
    for (let round = 0; round < 3; round++) {
      const r = await t.obs.services.observation.runRound();
      expect(r.probed).toBe(BUDGET);
      expect(r.budgetExhausted).toBe(true);
      order.push(r.results.map((x) => x.url));
      clock = new Date(clock.getTime() + 60_000);
    }
    // Rounds list their results by server id, so compare sets: rounds 1 and 2 reach 24 distinct
    // servers; round 3 takes the 6 never probed (due longest) before any second probe.
    const [r1, r2, r3] = order as [string[], string[], string[]];
    expect(new Set([...r1, ...r2]).size).toBe(2 * BUDGET);
    const never = fleet.urls.filter((u) => !r1.includes(u) && !r2.includes(u));
    expect(never).toHaveLength(N - 2 * BUDGET);
    for (const u of never) expect(r3).toContain(u);
    expect(new Set([...r1, ...r2, ...r3]).size).toBe(N);
    // The second probes of round 3 went to round 1's servers (due since T0 + 60 s), not round 2's.
    for (const u of r3.filter((x) => !never.includes(x))) expect(r1).toContain(u);

    // What each server saw: live ones answered tools/list exactly once or twice, never more.
    for (let i = 0; i < N; i++) {
      const lists = fleet.stats[i]!.lists.length;
      if (fleet.profile(i).dead) expect(lists).toBe(0);
      else expect(lists).toBeGreaterThanOrEqual(1);
      expect(lists).toBeLessThanOrEqual(2);
    }
    const rows = await t.obs.services.observation.schedule();
    expect(rows.every((r) => r.probes >= 1)).toBe(true);
  }, 600_000);

  it('outcomes follow the servers: dead ones fail with their 503, legacy-only ones answer over initialize, a manifest change is drift', async () => {
    const live = fleet.urls.findIndex((_, i) => !fleet.profile(i).dead);
    fleet.change(live);
    clock = new Date(clock.getTime() + 120_000);
    const rounds = [await t.obs.services.observation.runRound()];
    clock = new Date(clock.getTime() + 60_000);
    rounds.push(await t.obs.services.observation.runRound());
    clock = new Date(clock.getTime() + 60_000);
    rounds.push(await t.obs.services.observation.runRound());
    const results = rounds.flatMap((r) => r.results);
    for (const r of results) {
      const i = fleet.urls.indexOf(r.url);
      if (fleet.profile(i).dead) expect(r).toMatchObject({ outcome: 'failed', httpStatus: 503, recorded: true });
      else expect(r.outcome).toBe('ok');
    }
    expect(results.filter((r) => r.url === fleet.url(live)).some((r) => r.driftDetected)).toBe(true);
    expect(results.filter((r) => r.driftDetected).map((r) => r.url)).toEqual([fleet.url(live)]);
    const eras = await t.obs.db.query<{ url: string; era: string }>('SELECT s.url, f.era FROM mcp_server_facts f JOIN servers s ON s.id = f.server_id');
    expect(eras.length).toBeGreaterThan(0);
    for (const e of eras) expect(e.era).toBe(fleet.profile(fleet.urls.indexOf(e.url)).legacy ? 'legacy' : 'modern');
  }, 600_000);
});
