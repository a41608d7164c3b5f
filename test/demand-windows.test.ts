import { describe, expect, it } from 'vitest';
import { json, startTestApp } from './support/app.js';
import { backend } from './support/db.js';
import { aggregatesSettled } from './support/settle.js';
import { MARKET_FIGURES_MS } from '../src/services/trust.js';

// /api/demand's 24h, 7d and 30d windows (and /api/stats' checks of the last 24 hours) read the
// per-target hourly sums, never the demand rows: a gateway writes a row per upstream per second,
// and a 30-day window aggregated every one of them per computation (per request with ?window=).
// A window starts at the UTC hour its start falls in.

const HOUR = 3_600_000;

describe(`demand windows from hourly sums (${backend})`, () => {
  it('counts whole UTC hours from the hour the window starts in, the same in both forms of /api/demand and in /api/stats, without reading demand rows', async () => {
    let clock = Date.parse('2026-05-10T12:30:00.000Z');
    const app = await startTestApp({}, { now: () => new Date(clock) });
    const check = async (target: string) => {
      const r = await fetch(`${app.base}/v1/preflight?target=${encodeURIComponent(target)}`);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
    };
    try {
      const start = clock;
      // 25 hours before "now" (outside even the window's first hour), 24 h 20 min before (inside the
      // hour the 24h window starts in), 23 h 50 min before, and now.
      clock = start - 25 * HOUR;
      await check('https://old.example.com/mcp');
      clock = start - 24 * HOUR - 20 * 60_000;
      await check('https://edge.example.com/mcp');
      clock = start - 23 * HOUR - 50 * 60_000;
      await check('https://edge.example.com/mcp');
      clock = start;
      await check('https://now.example.com/mcp');
      await aggregatesSettled();
      const windows = async () => {
        const d = await json(fetch(`${app.base}/api/demand`));
        const byWindow = Object.fromEntries(
          d.windows.map((w: { window: string; total_checks: number; servers: { target: string; checks: number }[] }) => [
            w.window,
            { total: w.total_checks, targets: Object.fromEntries(w.servers.map((s) => [s.target, s.checks])) },
          ]),
        );
        // The paged form of each window answers the same figures.
        for (const w of ['24h', '7d', '30d', 'alltime']) {
          const page = await json(fetch(`${app.base}/api/demand?window=${w}&limit=10`));
          expect({ total: page.windows[0].total_checks, targets: Object.fromEntries(page.windows[0].servers.map((s: { target: string; checks: number }) => [s.target, s.checks])) }, w).toEqual(byWindow[w]);
        }
        clock += MARKET_FIGURES_MS; // the market figures are counted at most once per MARKET_FIGURES_MS
        byWindow.market24h = (await json(fetch(`${app.base}/api/stats`))).market_validation.preflight_checks_last_24h;
        clock -= MARKET_FIGURES_MS;
        return byWindow;
      };
      const before = await windows();
      expect(before['24h']).toEqual({ total: 3, targets: { 'https://edge.example.com/mcp': 2, 'https://now.example.com/mcp': 1 } });
      expect(before['7d']).toEqual({ total: 4, targets: { 'https://old.example.com/mcp': 1, 'https://edge.example.com/mcp': 2, 'https://now.example.com/mcp': 1 } });
      expect(before.market24h).toBe(3);
      // The windows are the sums, not the rows: without the rows they answer the same.
      await app.obs.db.query('DELETE FROM preflight_demand');
      clock += 1000;
      await check('https://now.example.com/mcp');
      await aggregatesSettled();
      const after = await windows();
      expect(after['24h']).toEqual({ total: 4, targets: { 'https://edge.example.com/mcp': 2, 'https://now.example.com/mcp': 2 } });
      expect(after['30d'].total).toBe(5);
      expect(after.alltime.total).toBe(5);
    } finally {
      await app.close();
    }
  }, 60_000);
});
