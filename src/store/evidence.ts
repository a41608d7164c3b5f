import type { Queryable } from '../db/index.js';
import { settleRollups } from './rollup-aggregator.js';
import { emptyHistogram, LATENCY_BIN_EDGES } from '../domain/latency-histogram.js';

// Read-only evidence queries behind the compliance exports and the agency checklist: telemetry
// history depth (rollups), telemetry summaries over a period (raw rows, so limited to
// TELEMETRY_RETENTION_DAYS), and receipts issued about a server.

export interface HistoryDepth {
  total: number;
  first_observed: Date | null;
  last_observed: Date | null;
  days_observed: number;
}

export interface PeriodEvents {
  total: number;
  successful: number;
  avg_latency_ms: number | null;
  /** Latency histogram of the period's reports (domain/latency-histogram.ts bins; latencyP95 reads it). */
  latency_hist: number[];
  first_event_at: Date | null;
  last_event_at: Date | null;
  by_tool: { tool_name: string; calls: number; failures: number }[];
}

const LONG = { longRunning: true } as const;

export function evidenceStore(db: Queryable) {
  return {
    /**
     * How long and how much the server has been observed, from the rollups (they are never
     * pruned), so raw telemetry retention does not shorten a server's history.
     */
    async historyDepth(serverId: number): Promise<HistoryDepth> {
      await settleRollups(db);
      const rows = await db.query<{ n: number | null; first: Date | null; last: Date | null; days: number }>(
        `SELECT t.n, t.first_at AS first, t.last_at AS last,
                (SELECT count(DISTINCT date_trunc('day', bucket AT TIME ZONE 'UTC'))::int8 FROM telemetry_hourly WHERE server_id = $1) AS days
           FROM (SELECT 1) one LEFT JOIN server_totals t ON t.server_id = $1`,
        [serverId],
      );
      const r = rows[0]!;
      return { total: r.n ?? 0, first_observed: r.first, last_observed: r.last, days_observed: r.days };
    },

    /**
     * Telemetry of a server with received_at in [from, to). Each statement reads every raw row of
     * the period (millions for a busy server over the retention): they run under the long bound.
     */
    async events(serverId: number, from: Date, to: Date): Promise<PeriodEvents> {
      const [agg] = await db.query<{ n: number; s: number | null; lat: number | null; first: Date | null; last: Date | null }>(
        `SELECT count(*)::int8 AS n, sum(CASE WHEN success THEN 1 ELSE 0 END)::int8 AS s, avg(latency_ms)::float8 AS lat,
                min(received_at) AS first, max(received_at) AS last
           FROM telemetry WHERE server_id = $1 AND received_at >= $2 AND received_at < $3`,
        [serverId, from, to],
        LONG,
      );
      // The same bins as the rollups: width_bucket over the lower edges puts a latency equal to an
      // edge in the bin above it, as latencyBin does.
      const bins = await db.query<{ bin: number; c: number }>(
        `SELECT width_bucket(latency_ms, $4::float8[])::int4 AS bin, count(*)::int8 AS c
           FROM telemetry WHERE server_id = $1 AND received_at >= $2 AND received_at < $3 GROUP BY 1`,
        [serverId, from, to, LATENCY_BIN_EDGES],
        LONG,
      );
      const hist = emptyHistogram();
      for (const b of bins) hist[b.bin] = Number(b.c);
      const byTool = await db.query<{ tool_name: string; calls: number; failures: number }>(
        `SELECT coalesce(tool_name, 'unknown') AS tool_name, count(*)::int8 AS calls, sum(CASE WHEN success THEN 0 ELSE 1 END)::int8 AS failures
           FROM telemetry WHERE server_id = $1 AND received_at >= $2 AND received_at < $3
          GROUP BY 1 ORDER BY calls DESC, tool_name LIMIT 100`,
        [serverId, from, to],
        LONG,
      );
      return {
        total: agg!.n,
        successful: agg!.s ?? 0,
        avg_latency_ms: agg!.lat,
        latency_hist: hist,
        first_event_at: agg!.first,
        last_event_at: agg!.last,
        by_tool: byTool,
      };
    },

    /** Receipts about `sub` issued in [from, to), oldest first, at most `limit`. */
    async receiptsFor(sub: string, from: Date, to: Date, limit = 1000): Promise<{ receipt_id: string; kind: string; issued_at: Date; verdict: string | null }[]> {
      return db.query(
        `SELECT receipt_id, kind, issued_at, coalesce(claim->>'verdict', claim->>'overall_result') AS verdict
           FROM receipts WHERE sub = $1 AND issued_at >= $2 AND issued_at < $3 ORDER BY issued_at, receipt_id LIMIT $4`,
        [sub, from, to, limit],
      );
    },
  };
}
