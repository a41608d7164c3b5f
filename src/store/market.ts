import type { Queryable } from '../db/index.js';
import { ALL_TIME_DEMAND, flushDemand, windowStart } from './demand.js';

// Demand and adoption figures behind `market_validation` in GET /api/stats (SPEC 4.1 "market
// validation metrics"; docs/scoring.md "Market validation"). Read-only counts over the tables
// that record demand: pre-flight checks (every kind), keys, paid verdicts, receipts.

export interface MarketFigures {
  preflight_checks_total: number;
  preflight_checks_last_24h: number;
  unique_preflight_targets: number;
  /** Distinct tracked servers named by at least one pre-flight check (any kind). */
  tracked_servers_vetted: number;
  /** Pre-flight checks made by gateways (`kind = gateway`). */
  gateway_decisions: number;
  agent_keys_issued: number;
  /** Verdicts served by /agent-query (trial keys and payments). */
  agent_queries_served: number;
  /** On-chain payments that bought a verdict (the verdict's receipt is attached to the payment). */
  paid_verdicts: number;
  /** Receipts issued (counted as stored, migration 1630), those RECEIPT_RETENTION_DAYS deleted since included. */
  receipts_issued: number;
}

export function marketStore(db: Queryable) {
  return {
    async figures(since24h: Date): Promise<MarketFigures> {
      // Demand counted in memory by this process is written first (it is per call).
      await flushDemand(db);
      const [r] = await db.query<{ [K in keyof MarketFigures]: number | null }>(
        `SELECT d.checks AS preflight_checks_total,
                (SELECT coalesce(sum(checks), 0)::int8 FROM preflight_demand_hourly WHERE bucket >= $1) AS preflight_checks_last_24h,
                d.targets AS unique_preflight_targets, d.gateway AS gateway_decisions, d.agent_query AS agent_queries_served,
                (SELECT count(DISTINCT t.server_url)::int8 FROM preflight_demand_targets t JOIN servers s ON s.url = t.server_url) AS tracked_servers_vetted,
                (SELECT count(*)::int8 FROM api_keys) AS agent_keys_issued,
                (SELECT count(*)::int8 FROM payments WHERE receipt_id IS NOT NULL) AS paid_verdicts,
                (SELECT coalesce(sum(issued), 0)::int8 FROM receipt_counts) AS receipts_issued
           FROM ${ALL_TIME_DEMAND} d`,
        [windowStart(since24h)],
      );
      const out = {} as MarketFigures;
      for (const [k, v] of Object.entries(r!)) out[k as keyof MarketFigures] = Number(v ?? 0);
      return out;
    },
  };
}
