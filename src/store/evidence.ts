import type { Queryable } from '../db/index.js';

// Per-server figures the behavioral evidence needs beyond the trust record: the 95th percentile
// latency and the time of the latest accepted report.

export function evidenceStore(db: Queryable) {
  return {
    async latencyProfile(serverUrl: string): Promise<{ p95_latency_ms: number | null; last_observed: Date | null }> {
      const rows = await db.query<{ p95: number | null; last: Date | null }>(
        `SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY t.latency_ms)::float8 AS p95, max(t.received_at) AS last
           FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1`,
        [serverUrl],
      );
      const r = rows[0];
      return { p95_latency_ms: r?.p95 ?? null, last_observed: r?.last ?? null };
    },
  };
}
