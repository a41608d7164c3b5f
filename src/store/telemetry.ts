import type { Queryable } from '../db/index.js';
import { groupByServer } from './by-server.js';
import { emptyHistogram, latencyBin } from '../domain/latency-histogram.js';
import { decayFactor, HALF_LIFE_HOURS, type SourceAccumulator } from '../domain/scoring.js';
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
// Decay of a stored accumulator (alias e) or of the incoming one (EXCLUDED) to the later of both times.
const ageFactor = (t: string) =>
  `power(2::float8, -(extract(epoch from (greatest(e.updated_at, EXCLUDED.updated_at) - ${t}.updated_at))::float8) / ${HALF_LIFE_S})`;
const decayedSum = (col: string) => `e.${col} * ${ageFactor('e')} + EXCLUDED.${col} * ${ageFactor('EXCLUDED')}`;
const histSum = (alias: string) => `ARRAY(SELECT a + b FROM unnest(${alias}.hist, EXCLUDED.hist) AS u(a, b))`;

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** A group of reports decayed to its newest one (`at`): weight, successes and latency sums. */
function decayedGroup(at: number, items: readonly RawRow[]): { w: number; s: number; l: number } {
  let w = 0;
  let s = 0;
  let l = 0;
  for (const r of items) {
    const f = decayFactor(at - r.at.getTime());
    w += f;
    if (r.success) s += f;
    l += f * r.latency_ms;
  }
  return { w, s, l };
}

const PARTITION_RACE_RETRIES = 5;
function isPartitionRace(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  return e?.code === '23514' && /violates partition constraint/.test(e.message ?? '');
}

const pgArray = (xs: readonly number[]) => `{${xs.join(',')}}`;

function is5xx(status: number | null): boolean {
  return status !== null && status >= 500 && status <= 599;
}

interface Sums {
  n: number;
  successes: number;
  latency_sum: number;
  n_5xx: number;
  hist: number[];
}
function addTo(s: Sums, r: { success: boolean; latency_ms: number; http_status: number | null }) {
  s.n++;
  if (r.success) s.successes++;
  s.latency_sum += r.latency_ms;
  if (is5xx(r.http_status)) s.n_5xx++;
  s.hist[latencyBin(r.latency_ms)]!++;
}
const newSums = (): Sums => ({ n: 0, successes: 0, latency_sum: 0, n_5xx: 0, hist: emptyHistogram() });

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

/** A committed raw row as the rollup aggregator reads it back. */
export interface RawRow {
  serverId: number;
  at: Date;
  source: string;
  success: boolean;
  latency_ms: number;
  http_status: number | null;
  /** The report's tool_name: per-tool evidence (tool_evidence) for the gate's per-tool decisions. */
  tool_name: string | null;
}

/**
 * The rollup upserts for a set of raw rows (aggregated in memory first, so each rollup row is
 * written once), as statements for ONE writable-CTE statement. Rollup rows are written in key
 * order, so two writers could not deadlock (there is one at a time anyway: rollup-aggregator.ts).
 */
export function rollupStatements(rows: readonly RawRow[]): Statement[] {
  const stmts: Statement[] = [];
  const totals = new Map<number, Sums & { first: number; last: number }>();
  const hourly = new Map<string, Sums & { serverId: number; bucket: number; source: string }>();
  const evidence = new Map<string, { serverId: number; source: string; at: number; items: RawRow[] }>();
  for (const r of rows) {
    const t = r.at.getTime();
    let tot = totals.get(r.serverId);
    if (!tot) totals.set(r.serverId, (tot = Object.assign(newSums(), { first: t, last: t })));
    addTo(tot, r);
    tot.first = Math.min(tot.first, t);
    tot.last = Math.max(tot.last, t);
    const bucket = Math.floor(t / HOUR_MS) * HOUR_MS;
    const hk = `${r.serverId}|${bucket}|${r.source}`;
    let h = hourly.get(hk);
    if (!h) hourly.set(hk, (h = Object.assign(newSums(), { serverId: r.serverId, bucket, source: r.source })));
    addTo(h, r);
    const ek = `${r.serverId}|${r.source}`;
    let e = evidence.get(ek);
    if (!e) evidence.set(ek, (e = { serverId: r.serverId, source: r.source, at: t, items: [] }));
    e.items.push(r);
    e.at = Math.max(e.at, t);
  }

  const tv = [...totals.entries()].sort((a, b) => a[0] - b[0]);
  stmts.push([
    `INSERT INTO server_totals AS e (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
     SELECT u.id, u.n, u.s, u.l, u.f, u.h::int8[], u.a, u.b
       FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::float8[], $5::int8[], $6::text[], $7::timestamptz[], $8::timestamptz[])
            AS u(id, n, s, l, f, h, a, b)
     ON CONFLICT (server_id) DO UPDATE SET
       n = e.n + EXCLUDED.n, successes = e.successes + EXCLUDED.successes, latency_sum = e.latency_sum + EXCLUDED.latency_sum,
       n_5xx = e.n_5xx + EXCLUDED.n_5xx, hist = ${histSum('e')},
       first_at = least(e.first_at, EXCLUDED.first_at), last_at = greatest(e.last_at, EXCLUDED.last_at)`,
    [
      tv.map(([id]) => id),
      tv.map(([, s]) => s.n),
      tv.map(([, s]) => s.successes),
      tv.map(([, s]) => s.latency_sum),
      tv.map(([, s]) => s.n_5xx),
      tv.map(([, s]) => pgArray(s.hist)),
      tv.map(([, s]) => new Date(s.first).toISOString()),
      tv.map(([, s]) => new Date(s.last).toISOString()),
    ],
  ]);

  const hv = [...hourly.values()].sort((a, b) => a.serverId - b.serverId || a.bucket - b.bucket || (a.source < b.source ? -1 : a.source > b.source ? 1 : 0));
  stmts.push([
    `INSERT INTO telemetry_hourly AS e (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
     SELECT u.id, u.b, u.src, u.n, u.s, u.l, u.f, u.h::int8[]
       FROM unnest($1::int8[], $2::timestamptz[], $3::text[], $4::int8[], $5::int8[], $6::float8[], $7::int8[], $8::text[])
            AS u(id, b, src, n, s, l, f, h)
     ON CONFLICT (server_id, bucket, source) DO UPDATE SET
       n = e.n + EXCLUDED.n, successes = e.successes + EXCLUDED.successes, latency_sum = e.latency_sum + EXCLUDED.latency_sum,
       n_5xx = e.n_5xx + EXCLUDED.n_5xx, hist = ${histSum('e')}`,
    [
      hv.map((h) => h.serverId),
      hv.map((h) => new Date(h.bucket).toISOString()),
      hv.map((h) => h.source),
      hv.map((h) => h.n),
      hv.map((h) => h.successes),
      hv.map((h) => h.latency_sum),
      hv.map((h) => h.n_5xx),
      hv.map((h) => pgArray(h.hist)),
    ],
  ]);

  // Each group is decayed to its newest report, then merged with the stored accumulator.
  const ev = [...evidence.values()].map((e) => Object.assign({}, e, decayedGroup(e.at, e.items))).sort((a, b) => a.serverId - b.serverId || cmp(a.source, b.source));
  stmts.push([
    `INSERT INTO trust_evidence AS e (server_id, source, weight, successes, latency_sum, reports, updated_at)
     SELECT * FROM unnest($1::int8[], $2::text[], $3::float8[], $4::float8[], $5::float8[], $6::int8[], $7::timestamptz[])
     ON CONFLICT (server_id, source) DO UPDATE SET
       weight = ${decayedSum('weight')}, successes = ${decayedSum('successes')}, latency_sum = ${decayedSum('latency_sum')},
       reports = e.reports + EXCLUDED.reports, updated_at = greatest(e.updated_at, EXCLUDED.updated_at)`,
    [
      ev.map((e) => e.serverId),
      ev.map((e) => e.source),
      ev.map((e) => e.w),
      ev.map((e) => e.s),
      ev.map((e) => e.l),
      ev.map((e) => e.items.length),
      ev.map((e) => new Date(e.at).toISOString()),
    ],
  ]);

  // Per-tool evidence (the gate's per-tool decisions): the same accumulators, keyed also by the
  // report's tool_name; reports without one add nothing here.
  const toolGroups = new Map<string, { serverId: number; tool: string; source: string; at: number; items: RawRow[] }>();
  for (const r of rows) {
    if (r.tool_name === null) continue;
    const t = r.at.getTime();
    const k = JSON.stringify([r.serverId, r.tool_name, r.source]);
    let g = toolGroups.get(k);
    if (!g) toolGroups.set(k, (g = { serverId: r.serverId, tool: r.tool_name, source: r.source, at: t, items: [] }));
    g.items.push(r);
    g.at = Math.max(g.at, t);
  }
  if (toolGroups.size > 0) {
    const tev = [...toolGroups.values()]
      .map((g) => Object.assign({}, g, decayedGroup(g.at, g.items)))
      .sort((a, b) => a.serverId - b.serverId || cmp(a.tool, b.tool) || cmp(a.source, b.source));
    stmts.push([
      `INSERT INTO tool_evidence AS e (server_id, tool_name, source, weight, successes, latency_sum, reports, updated_at)
       SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::float8[], $5::float8[], $6::float8[], $7::int8[], $8::timestamptz[])
       ON CONFLICT (server_id, tool_name, source) DO UPDATE SET
         weight = ${decayedSum('weight')}, successes = ${decayedSum('successes')}, latency_sum = ${decayedSum('latency_sum')},
         reports = e.reports + EXCLUDED.reports, updated_at = greatest(e.updated_at, EXCLUDED.updated_at)`,
      [
        tev.map((e) => e.serverId),
        tev.map((e) => e.tool),
        tev.map((e) => e.source),
        tev.map((e) => e.w),
        tev.map((e) => e.s),
        tev.map((e) => e.l),
        tev.map((e) => e.items.length),
        tev.map((e) => new Date(e.at).toISOString()),
      ],
    ]);
  }
  return stmts;
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
