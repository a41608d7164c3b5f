import type { Queryable } from '../db/index.js';

/** A validated telemetry report: exactly the five fields of SPEC 2.2. */
export interface TelemetryReport {
  server_url: string;
  success: boolean;
  latency_ms: number;
  tool_name: string | null;
  http_status: number | null;
}

export interface ServerMetrics {
  total_interactions: number;
  successes: number;
  avg_latency_ms: number;
  last_observed: Date | null;
}

export function telemetryStore(db: Queryable) {
  return {
    async insert(serverId: number, r: TelemetryReport, receivedAt: Date): Promise<void> {
      await db.query(
        'INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status) VALUES ($1, $2, $3, $4, $5, $6)',
        [serverId, receivedAt, r.success, r.latency_ms, r.tool_name, r.http_status],
      );
    },

    /** Plain observed figures over all accepted reports (DECISIONS.md `metrics`). */
    async metrics(serverId: number): Promise<ServerMetrics> {
      const rows = await db.query<{ n: number; s: number | null; lat: number | null; last: Date | null }>(
        `SELECT count(*)::int8 AS n, sum(CASE WHEN success THEN 1 ELSE 0 END)::int8 AS s,
                avg(latency_ms)::float8 AS lat, max(received_at) AS last
           FROM telemetry WHERE server_id = $1`,
        [serverId],
      );
      const r = rows[0]!;
      return { total_interactions: r.n, successes: r.s ?? 0, avg_latency_ms: r.lat ?? 0, last_observed: r.last };
    },

    /** Per-category baseline over servers with evidence: mean and p95 latency, mean success rate. */
    async categoryBaseline(category: string): Promise<{ avg_latency_ms: number; p95_latency_ms: number; avg_success_rate: number; server_count: number }> {
      const rows = await db.query<{ lat: number | null; p95: number | null; sr: number | null; n: number }>(
        `WITH per_server AS (
           SELECT t.server_id, avg(t.latency_ms) AS lat, avg(CASE WHEN t.success THEN 1.0 ELSE 0.0 END) AS sr
             FROM telemetry t JOIN servers s ON s.id = t.server_id
            WHERE s.category = $1 GROUP BY t.server_id)
         SELECT avg(lat)::float8 AS lat,
                (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY t.latency_ms)
                   FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.category = $1)::float8 AS p95,
                avg(sr)::float8 AS sr,
                (SELECT count(*) FROM servers WHERE category = $1)::int8 AS n
           FROM per_server`,
        [category],
      );
      const r = rows[0]!;
      return { avg_latency_ms: r.lat ?? 0, p95_latency_ms: r.p95 ?? 0, avg_success_rate: r.sr ?? 0, server_count: r.n };
    },
  };
}

export type TelemetryStore = ReturnType<typeof telemetryStore>;
