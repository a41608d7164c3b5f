import { describe, expect, it } from 'vitest';
import { json, postJson, startTestApp } from './support/app.js';
import { backend } from './support/db.js';
import { SCORE_CACHE_MS } from '../src/services/trust-engine.js';

// /api/sla-tier?server= and /benchmark/{slug} read a server's window sums from the rollups. They
// read them per request: an anonymous flood of one server's tier cost a database read each, where
// a trust read is answered from memory. They are kept with the engine's score summary of that
// server, which a report of it replaces (read-your-writes) and which lives at most SCORE_CACHE_MS.

describe(`per-server rollup reads follow the score, not the request (${backend})`, () => {
  it('a flood of one server\'s SLA tier and benchmark reads its windows about once; a report shows in the next read', async () => {
    const app = await startTestApp({});
    try {
      const url = 'https://tiers.example.com/mcp';
      for (let i = 0; i < 3; i++) expect((await postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 40 })).status).toBe(200);
      const slug = (await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(url)}`))).server.slug as string;
      // Count the window reads the two endpoints make (the only per-server sums of telemetry_hourly).
      const db = app.obs.db;
      const query = db.query.bind(db);
      let windowReads = 0;
      db.query = ((text: unknown, ...rest: unknown[]) => {
        if (typeof text === 'string' && text.includes('FROM telemetry_hourly WHERE server_id = $1')) windowReads++;
        return (query as (...a: unknown[]) => unknown)(text, ...rest);
      }) as typeof db.query;
      try {
        const started = performance.now();
        const tiers = await Promise.all(Array.from({ length: 20 }, () => json(fetch(`${app.base}/api/sla-tier?server=${encodeURIComponent(url)}`))));
        expect(new Set(tiers.map((t) => t.interactions_30d))).toEqual(new Set([3]));
        const marks = await Promise.all(Array.from({ length: 20 }, () => json(fetch(`${app.base}/benchmark/${slug}`))));
        expect(new Set(marks.map((b) => b.volume.calls_7d))).toEqual(new Set([3]));
        // One SLA read and three benchmark windows per computation of the score, which lives
        // SCORE_CACHE_MS: the 40 requests see one, or a few more on a machine slow enough to take
        // longer than that (100 reads when every request read them).
        const computations = 1 + Math.ceil((performance.now() - started) / SCORE_CACHE_MS);
        expect(windowReads).toBeGreaterThan(0);
        expect(windowReads).toBeLessThanOrEqual(computations * (1 + 3));
        expect(windowReads).toBeLessThan(40);
        // A report of the server replaces its score: the next reads show it.
        expect((await postJson(`${app.base}/api/report`, { server_url: url, success: false, latency_ms: 90 })).status).toBe(200);
        expect((await json(fetch(`${app.base}/api/sla-tier?server=${encodeURIComponent(url)}`))).interactions_30d).toBe(4);
        expect((await json(fetch(`${app.base}/benchmark/${slug}`))).volume).toMatchObject({ total_calls: 4, calls_7d: 4 });
      } finally {
        db.query = query;
      }
    } finally {
      await app.close();
    }
  }, 60_000);
});
