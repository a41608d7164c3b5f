import { describe, expect, it } from 'vitest';
import { json, postJson, startTestApp } from './support/app.js';
import { backend } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { createDemandRetention } from '../src/services/demand-retention.js';
import { MARKET_FIGURES_MS } from '../src/services/trust.js';
import { demandStore } from '../src/store/demand.js';

// DEMAND_RETENTION_DAYS: every pre-flight, gate decision and agent query is a demand row (one
// per claim per second) and every distinct target text a per-target sum, any name a client
// sends; before this job both only grew, and the market figures read every row once a minute.
// Rows older than the retention are deleted; the sums of targets that named no tracked server
// and were not checked within it are retired into one row, so every all-time figure still
// counts each check.

const DAY = 86_400_000;

describe(`demand retention (${backend})`, () => {
  it('deletes old demand rows and retires stale untracked targets; every all-time figure and every window keeps its counts', async () => {
    let clock = Date.parse('2026-03-01T00:00:00.000Z');
    const app = await startTestApp({ DEMAND_RETENTION_DAYS: '40' }, { now: () => new Date(clock) });
    const preflight = async (target: string) => {
      const r = await fetch(`${app.base}/v1/preflight?target=${encodeURIComponent(target)}`);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
    };
    const gate = async (upstream: string) => {
      const r = await fetch(`${app.base}/v1/gate`, { headers: { 'x-mcp-server': upstream } });
      expect(r.status).toBeLessThan(500);
      await r.arrayBuffer();
    };
    const demand = async () => json(fetch(`${app.base}/api/demand?window=alltime&limit=100`));
    const figures = async () => {
      await aggregatesSettled();
      clock += MARKET_FIGURES_MS; // counted at most once per MARKET_FIGURES_MS
      const stats = await json(fetch(`${app.base}/api/stats`));
      const all = await json(fetch(`${app.base}/api/demand`));
      const d = await demand();
      return {
        market: stats.market_validation,
        total: all.total_preflight_checks,
        mix: all.verdict_mix,
        windows: all.windows.map((w: { window: string; total_checks: number; unique_targets: number; verdict_mix: unknown }) => [w.window, w.total_checks, w.unique_targets, w.verdict_mix]),
        targets: new Set<string>(d.windows.find((w: { window: string }) => w.window === 'alltime').servers.map((s: { target: string }) => s.target)),
        byCategory: await demandStore(app.obs.db).checksByCategory(null),
      };
    };
    try {
      const tracked = 'https://kept.example.com/mcp';
      expect((await postJson(`${app.base}/api/report`, { server_url: tracked, success: true, latency_ms: 5 })).status).toBe(200);
      // Day 0: a tracked server, two untracked targets (a URL and a bare name), a gateway's
      // untracked upstream, and a target that will be checked again on day 30.
      await preflight(tracked);
      await preflight('https://gone.example.com/mcp');
      await preflight('a name nobody has');
      await gate('https://gated.example.com/mcp');
      await gate('https://gated.example.com/mcp');
      await preflight('https://again.example.com/mcp');
      clock += 30 * DAY;
      await preflight('https://again.example.com/mcp');
      // Day 45: cutoff day 5. Day 0's rows go; gone, the bare name and gated are retired.
      clock += 15 * DAY;
      const before = await figures();
      expect(before.market).toMatchObject({ preflight_checks_total: 7, unique_preflight_targets: 5, gateway_decisions: 2, tracked_servers_vetted: 1 });
      expect(before.targets).toEqual(new Set([tracked, 'https://gone.example.com/mcp', 'a name nobody has', 'https://gated.example.com/mcp', 'https://again.example.com/mcp']));

      const small = createDemandRetention({ db: app.obs.db, config: app.obs.config, now: () => new Date(clock) }, { batch: 2 });
      small.close();
      // Day 0's rows (the two gate calls share a claim: one row or two, as the buffer's writes fell).
      const old = await app.obs.db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM preflight_demand WHERE checked_at < $1', [new Date(clock - 40 * DAY)]);
      expect(Number(old[0]!.n)).toBeGreaterThanOrEqual(5);
      // Day 0's hourly sums: one per target of that hour (the windows read these, never the rows).
      const hourly = await app.obs.db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM preflight_demand_hourly WHERE bucket < $1', [new Date(clock - 40 * DAY)]);
      expect(Number(hourly[0]!.n)).toBe(5);
      // Three targets retired (batches of 2: the cursor carries on past the first batch), day 0's rows and hourly sums deleted.
      expect(await small.purge(new Date(clock))).toBe(3 + Number(old[0]!.n) + 5);
      expect((await app.obs.db.query<{ target: string }>('SELECT target FROM preflight_demand ORDER BY id')).map((r) => r.target)).toEqual(['https://again.example.com/mcp']);
      expect((await app.obs.db.query<{ target: string }>('SELECT target FROM preflight_demand_hourly')).map((r) => r.target)).toEqual(['https://again.example.com/mcp']);

      const after = await figures();
      expect(after.market).toEqual(Object.assign({}, before.market, { computed_at: after.market.computed_at }));
      expect(after.total).toBe(before.total);
      expect(after.mix).toEqual(before.mix);
      expect(after.windows).toEqual(before.windows);
      expect(after.byCategory).toEqual(before.byCategory);
      // Retired targets leave the all-time list; the tracked server and the target checked within the retention stay.
      expect(after.targets).toEqual(new Set([tracked, 'https://again.example.com/mcp']));

      // Nothing more to do; and a retired target checked again counts on top of what was retired.
      expect(await small.purge(new Date(clock))).toBe(0);
      await preflight('https://gone.example.com/mcp');
      const again = await figures();
      expect(again.market.preflight_checks_total).toBe(8);
      expect(again.windows.find((w: unknown[]) => w[0] === 'alltime')[1]).toBe(8);
      expect(again.targets.has('https://gone.example.com/mcp')).toBe(true);

      // The periodic job runs the same purge once per period across instances.
      clock += 60 * DAY;
      expect(await app.obs.services.demandRetention.job.tick(new Date(clock))).toBe(true);
      expect(await app.obs.services.demandRetention.job.tick(new Date(clock))).toBe(false);
      expect(await app.obs.db.query('SELECT 1 FROM preflight_demand')).toEqual([]);
      expect(await app.obs.db.query('SELECT 1 FROM preflight_demand_hourly')).toEqual([]);
      const last = await figures();
      expect(last.market.preflight_checks_total).toBe(8);
      expect(last.targets).toEqual(new Set([tracked]));
    } finally {
      await app.close();
    }
  }, 90_000);

  it('0 keeps every demand row; a retention shorter than the 30-day window is refused at start-up', async () => {
    const keep = await startTestApp({ DEMAND_RETENTION_DAYS: '0' });
    try {
      const r = await fetch(`${keep.base}/v1/preflight?target=${encodeURIComponent('https://any.example.com/mcp')}`);
      await r.arrayBuffer();
      await demandStore(keep.obs.db).totals(null); // writes the buffered row
      expect(await keep.obs.services.demandRetention.purge(new Date(Date.now() + 100_000 * DAY))).toBe(0);
      expect((await keep.obs.db.query('SELECT 1 FROM preflight_demand')).length).toBe(1);
    } finally {
      await keep.close();
    }
    expect(loadConfig({}).demandRetentionDays).toBe(90);
    expect(loadConfig({ DEMAND_RETENTION_DAYS: '31' }).demandRetentionDays).toBe(31);
    for (const bad of ['30', '-1', 'x', '40.5']) expect(() => loadConfig({ DEMAND_RETENTION_DAYS: bad }), bad).toThrow(ConfigError);
    expect(() => loadConfig({ DEMAND_RETENTION_DAYS: '30' })).toThrow(/DEMAND_RETENTION_DAYS.*at least 31/);
  });
});
