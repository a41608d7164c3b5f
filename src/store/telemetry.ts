import type { Queryable } from '../db/index.js';
import { groupByServer } from './by-server.js';
import { LATENCY_BIN_EDGES, LATENCY_BINS } from '../domain/latency-histogram.js';
import { HALF_LIFE_HOURS, type SourceAccumulator } from '../domain/scoring.js';
import { HOUR_MS, type HourRollup, type SourceHourRollup } from '../domain/anomaly.js';
import type { ServerTotals } from '../domain/baseline.js';
import type { Statement } from './one-statement.js';
import { rollupsAppended, settleRollups } from './rollup-aggregator.js';
import { dbSignal } from './db-signal.js';

/** A validated telemetry report: exactly the five fields of SPEC 2.2. */
export interface TelemetryReport {
  server_url: string;
  success: boolean;
  latency_ms: number;
  tool_name: string | null;
  http_status: number | null;
}

/** One accepted report as ingestion (and the demo loader) hands it to the store. */
export interface IngestRow {
  serverId: number;
  report: TelemetryReport;
  at: Date;
  /** Report source key (src/services/report-source.ts): a hash, never an address. */
  source: string;
}

export interface StoredTotals extends ServerTotals {
  server_id: number;
  n_5xx: number;
  first_at: Date;
  last_at: Date;
}

const HALF_LIFE_S = HALF_LIFE_HOURS * 3600;
// 2^(-age / half-life) for an age in seconds. PostgreSQL raises "value out of range: underflow"
// where JavaScript gives 0 (ages past about 1,074 half-lives, 20 years), so the exponent stops at
// -1000: 2^-1000 is 1e-301, nothing next to any weight.
const halfLives = (ageSeconds: string) => `power(2::float8, greatest(-1000::float8, -(${ageSeconds})::float8 / ${HALF_LIFE_S}))`;
// Decay of a stored accumulator (alias e) or of the incoming one (EXCLUDED) to the later of both times.
const ageFactor = (t: string) => halfLives(`extract(epoch from (greatest(e.updated_at, EXCLUDED.updated_at) - ${t}.updated_at))`);
const decayedSum = (col: string) => `e.${col} * ${ageFactor('e')} + EXCLUDED.${col} * ${ageFactor('EXCLUDED')}`;
const histSum = (alias: string) => `ARRAY(SELECT a + b FROM unnest(${alias}.hist, EXCLUDED.hist) AS u(a, b))`;

const PARTITION_RACE_RETRIES = 5;
function isPartitionRace(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  return e?.code === '23514' && /violates partition constraint/.test(e.message ?? '');
}

const pgArray = (xs: readonly number[]) => `{${xs.join(',')}}`;

// In-process listeners told which servers got new telemetry, after the commit (score caches).
const committed = dbSignal<[serverIds: number[]]>();

/** Calls `fn` with the server ids of every telemetry write committed through `db` in this process. */
export function onTelemetryCommitted(db: Queryable, fn: (serverIds: number[]) => void): () => void {
  return committed.on(db, fn);
}

function notifyCommitted(db: Queryable, rows: readonly IngestRow[]): void {
  notifyServersChanged(db, [...new Set(rows.map((r) => r.serverId))]);
}

/** Tells the same listeners that these servers changed otherwise (a catalogue import tracked or re-categorised them). */
export function notifyServersChanged(db: Queryable, serverIds: number[]): void {
  committed.emit(db, serverIds);
}

const HOUR_S = HOUR_MS / 1000;
// The latency histogram of a group as an int8[] of LATENCY_BINS counts; `bin` is the row's
// width_bucket over LATENCY_BIN_EDGES, which is latencyBin's bin (0 below the first edge, i for
// [edge i-1, edge i), the last bin open-ended).
const HIST_OF_GROUP = `ARRAY[${Array.from({ length: LATENCY_BINS }, (_, i) => `count(*) FILTER (WHERE bin = ${i})`).join(', ')}]::int8[]`;
// A group's decayed accumulators: each row weighs decayFactor (domain/scoring.ts) of its age
// behind the newest row of its group, 2^(-age / half-life), so the group is brought to its newest
// report; the upsert then merges it with the stored accumulator (decayedSum).
const decayedGroupOver = (partition: string) => halfLives(`extract(epoch from (max(received_at) OVER (PARTITION BY ${partition}) - received_at))`);
// The counts of a group (server_totals, telemetry_hourly): n, successes, latency_sum, n_5xx, hist;
// and the same added to the stored row.
const SUMS_OF_GROUP = `count(*), count(*) FILTER (WHERE success), sum(latency_ms), count(*) FILTER (WHERE http_status BETWEEN 500 AND 599), ${HIST_OF_GROUP}`;
const SUMS_MERGED = `n = e.n + EXCLUDED.n, successes = e.successes + EXCLUDED.successes, latency_sum = e.latency_sum + EXCLUDED.latency_sum,
         n_5xx = e.n_5xx + EXCLUDED.n_5xx, hist = ${histSum('e')}`;
// The decayed accumulators of a group whose rows carry their factor `f` (trust_evidence,
// tool_evidence): weight, successes, latency_sum, reports, updated_at; and the merge with the stored row.
const DECAYED_OF_GROUP = 'sum(f), coalesce(sum(f) FILTER (WHERE success), 0), sum(f * latency_ms), count(*), max(received_at)';
const DECAYED_MERGED = `weight = ${decayedSum('weight')}, successes = ${decayedSum('successes')}, latency_sum = ${decayedSum('latency_sum')},
         reports = e.reports + EXCLUDED.reports, updated_at = greatest(e.updated_at, EXCLUDED.updated_at)`;

/**
 * THE fold of committed raw rows into the rollups (server_totals, telemetry_hourly,
 * trust_evidence, tool_evidence), in PostgreSQL: one statement whose writable CTEs aggregate the
 * rows matching `where` (over telemetry's own columns, its parameters from $1) per rollup key
 * and upsert each rollup row once, in key order. Nothing travels to the process but the answer:
 * how many rows were folded, the largest raw id, and the servers they belong to.
 */
export function foldStatement(where: string, params: unknown[]): Statement {
  const edges = params.length + 1;
  return [
    `WITH raw AS MATERIALIZED (
       SELECT id, server_id, received_at, success, latency_ms, http_status, coalesce(source, '') AS source, tool_name,
              width_bucket(latency_ms, $${edges}::float8[]) AS bin
         FROM telemetry WHERE ${where}
     ),
     totals AS (
       INSERT INTO server_totals AS e (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
       SELECT server_id, ${SUMS_OF_GROUP}, min(received_at), max(received_at)
         FROM raw GROUP BY server_id ORDER BY server_id
       ON CONFLICT (server_id) DO UPDATE SET
         ${SUMS_MERGED},
         first_at = least(e.first_at, EXCLUDED.first_at), last_at = greatest(e.last_at, EXCLUDED.last_at)
     ),
     hourly AS (
       INSERT INTO telemetry_hourly AS e (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
       SELECT server_id, to_timestamp(floor(extract(epoch from received_at) / ${HOUR_S}) * ${HOUR_S}) AS bucket, source,
              ${SUMS_OF_GROUP}
         FROM raw GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
       ON CONFLICT (server_id, bucket, source) DO UPDATE SET
         ${SUMS_MERGED}
     ),
     evidence AS (
       INSERT INTO trust_evidence AS e (server_id, source, weight, successes, latency_sum, reports, updated_at)
       SELECT server_id, source, ${DECAYED_OF_GROUP}
         FROM (SELECT raw.*, ${decayedGroupOver('server_id, source')} AS f FROM raw) d
        GROUP BY server_id, source ORDER BY server_id, source
       ON CONFLICT (server_id, source) DO UPDATE SET
         ${DECAYED_MERGED}
     ),
     -- Per-tool evidence (the gate's per-tool decisions): the same accumulators, keyed also by the
     -- report's tool_name; reports without one add nothing here.
     tools AS (
       INSERT INTO tool_evidence AS e (server_id, tool_name, source, weight, successes, latency_sum, reports, updated_at)
       SELECT server_id, tool_name, source, ${DECAYED_OF_GROUP}
         FROM (SELECT raw.*, ${decayedGroupOver('server_id, tool_name, source')} AS f FROM raw WHERE tool_name IS NOT NULL) d
        GROUP BY server_id, tool_name, source ORDER BY server_id, tool_name, source
       ON CONFLICT (server_id, tool_name, source) DO UPDATE SET
         ${DECAYED_MERGED}
     )
     SELECT count(*)::int AS folded, coalesce(max(id), 0)::text AS max_id, coalesce(array_agg(DISTINCT server_id), '{}')::int8[] AS server_ids FROM raw`,
    [...params, pgArray(LATENCY_BIN_EDGES)],
  ];
}

export function telemetryStore(db: Queryable) {
  /**
   * THE acknowledged write: one multi-row INSERT of raw rows, nothing else. Each row carries its
   * source and the id of the inserting transaction (xid), from which the rollup aggregator
   * (rollup-aggregator.ts) folds it into the rollups once it is committed.
   */
  async function append(q: Queryable, rows: readonly IngestRow[]): Promise<void> {
    const stmt: Statement = [
      `INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status, source, xid)
       SELECT u.*, pg_current_xact_id()::text::int8
         FROM unnest($1::int8[], $2::timestamptz[], $3::bool[], $4::float8[], $5::text[], $6::int4[], $7::text[]) AS u`,
      [
        rows.map((r) => r.serverId),
        rows.map((r) => r.at.toISOString()),
        rows.map((r) => r.report.success),
        rows.map((r) => r.report.latency_ms),
        rows.map((r) => r.report.tool_name),
        rows.map((r) => r.report.http_status),
        rows.map((r) => r.source),
      ],
      // Parsed and planned once per connection instead of on every commit: a quarter less
      // database CPU per report at 25 reports per commit (docs/performance.md "Sixth pass").
      { prepare: 'telemetry_append' },
    ];
    for (let attempt = 1; ; attempt++) {
      try {
        await q.query(...stmt);
        return;
      } catch (err) {
        // A row routed to the default partition while the partition job attached its month's
        // partition fails PostgreSQL's re-check (the insert planned with the old partition set).
        // The statement is atomic, so nothing was written: run it again, now routed to the new
        // partition. No row is ever refused because of partition maintenance.
        if (attempt < PARTITION_RACE_RETRIES && isPartitionRace(err)) continue;
        throw err;
      }
    }
  }

  return {
    /**
     * The acknowledged ingest write (group commit): the raw rows only, committed when this
     * resolves. The rollups follow within one aggregator pass; a read in this process waits for
     * that pass (settleRollups), so it still sees the rows.
     */
    async append(rows: readonly IngestRow[]): Promise<void> {
      if (rows.length === 0) return;
      await append(db, rows);
      rollupsAppended(
        db,
        rows.map((r) => r.serverId),
      );
      notifyCommitted(db, rows);
    },

    /**
     * Stores reports and waits until the rollups include them (loaders, tools, tests): the
     * append, then an aggregator pass covering it.
     */
    async insertMany(rows: readonly IngestRow[]): Promise<void> {
      if (rows.length === 0) return;
      await this.append(rows);
      await settleRollups(db);
    },

    async insert(serverId: number, r: TelemetryReport, receivedAt: Date, source: string): Promise<void> {
      await this.insertMany([{ serverId, report: r, at: receivedAt, source }]);
    },

    async totals(serverIds: readonly number[]): Promise<Map<number, StoredTotals>> {
      await settleRollups(db, serverIds);
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<StoredTotals>(
        `SELECT server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at FROM server_totals WHERE server_id = ANY($1::int8[])`,
        [serverIds],
      );
      return new Map(rows.map((r) => [r.server_id, { ...r, hist: r.hist.map(Number) }]));
    },

    async evidence(serverIds: readonly number[]): Promise<Map<number, SourceAccumulator[]>> {
      await settleRollups(db, serverIds);
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<SourceAccumulator & { server_id: number }>(
        `SELECT server_id, source, weight, successes, latency_sum, reports, updated_at FROM trust_evidence WHERE server_id = ANY($1::int8[])`,
        [serverIds],
      );
      return groupByServer(rows);
    },

    /** Per-source evidence of one tool of a server (tool_evidence; empty when none). */
    async toolEvidence(serverId: number, toolName: string): Promise<SourceAccumulator[]> {
      await settleRollups(db, [serverId]);
      const rows = await db.query<SourceAccumulator>(
        `SELECT source, weight, successes, latency_sum, reports, updated_at FROM tool_evidence WHERE server_id = $1 AND tool_name = $2 ORDER BY source`,
        [serverId, toolName],
      );
      return rows.map((r) => ({ ...r, weight: Number(r.weight), successes: Number(r.successes), latency_sum: Number(r.latency_sum), reports: Number(r.reports), updated_at: new Date(r.updated_at) }));
    },

    /** Hourly rollups (all sources summed) of the given servers with from <= bucket <= to. */
    async hourly(serverIds: readonly number[], from: Date, to: Date): Promise<Map<number, HourRollup[]>> {
      await settleRollups(db, serverIds);
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<HourRollup & { server_id: number }>(
        `SELECT server_id, bucket, sum(n)::int8 AS n, sum(successes)::int8 AS successes, sum(latency_sum)::float8 AS latency_sum,
                sum(n_5xx)::int8 AS n_5xx
           FROM telemetry_hourly WHERE server_id = ANY($1::int8[]) AND bucket >= $2 AND bucket <= $3
          GROUP BY server_id, bucket ORDER BY server_id, bucket`,
        [serverIds, from.toISOString(), to.toISOString()],
      );
      return groupByServer(rows);
    },

    /** Hourly rollups per source of the given servers with from <= bucket <= to (source-robust anomaly tests). */
    async hourlyBySource(serverIds: readonly number[], from: Date, to: Date): Promise<Map<number, SourceHourRollup[]>> {
      await settleRollups(db, serverIds);
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<SourceHourRollup & { server_id: number }>(
        `SELECT server_id, bucket, source, n, successes, latency_sum, n_5xx
           FROM telemetry_hourly WHERE server_id = ANY($1::int8[]) AND bucket >= $2 AND bucket <= $3
          ORDER BY server_id, bucket, source`,
        [serverIds, from.toISOString(), to.toISOString()],
      );
      return groupByServer(rows, (h) => ({ ...h, n: Number(h.n), successes: Number(h.successes), latency_sum: Number(h.latency_sum), n_5xx: Number(h.n_5xx) }));
    },

    /** Sums over one server's rollups with from <= bucket < to (null bounds are open). */
    async windowSums(serverId: number, from: Date | null, to: Date | null): Promise<{ n: number; successes: number; latency_sum: number }> {
      await settleRollups(db, [serverId]);
      const rows = await db.query<{ n: number; successes: number; latency_sum: number }>(
        `SELECT coalesce(sum(n), 0)::int8 AS n, coalesce(sum(successes), 0)::int8 AS successes, coalesce(sum(latency_sum), 0)::float8 AS latency_sum
           FROM telemetry_hourly WHERE server_id = $1 AND ($2::timestamptz IS NULL OR bucket >= $2) AND ($3::timestamptz IS NULL OR bucket < $3)`,
        [serverId, from?.toISOString() ?? null, to?.toISOString() ?? null],
      );
      return rows[0]!;
    },

    /** Accepted reports per server with bucket >= from (all servers, from the hourly rollups). */
    async countsSince(from: Date): Promise<Map<number, number>> {
      await settleRollups(db);
      const rows = await db.query<{ server_id: number; n: number }>(
        'SELECT server_id, sum(n)::int8 AS n FROM telemetry_hourly WHERE bucket >= $1 GROUP BY server_id',
        [from.toISOString()],
      );
      return new Map(rows.map((r) => [r.server_id, r.n]));
    },

    /** countsSince for the given servers only (a page of a list). */
    async countsSinceFor(serverIds: readonly number[], from: Date): Promise<Map<number, number>> {
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<{ server_id: number; n: number }>(
        'SELECT server_id, sum(n)::int8 AS n FROM telemetry_hourly WHERE server_id = ANY($1::int8[]) AND bucket >= $2 GROUP BY server_id',
        [serverIds, from.toISOString()],
      );
      return new Map(rows.map((r) => [r.server_id, r.n]));
    },

    /** Distinct UTC days with at least one report. */
    async daysObserved(serverId: number): Promise<number> {
      await settleRollups(db, [serverId]);
      const rows = await db.query<{ d: number }>(
        `SELECT count(DISTINCT date_trunc('day', bucket AT TIME ZONE 'UTC'))::int8 AS d FROM telemetry_hourly WHERE server_id = $1`,
        [serverId],
      );
      return rows[0]!.d;
    },

    /** Index-wide report count (sum of the per-server totals). */
    async totalInteractions(): Promise<number> {
      await settleRollups(db);
      const rows = await db.query<{ n: number }>('SELECT coalesce(sum(n), 0)::int8 AS n FROM server_totals');
      return rows[0]!.n;
    },
  };
}

export type TelemetryStore = ReturnType<typeof telemetryStore>;
