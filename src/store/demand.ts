import type { Queryable } from '../db/index.js';
import type { Statement } from './one-statement.js';
import { dbSignal } from './db-signal.js';

// Pre-flight demand signals (table preflight_demand). Nothing in the scoring reads this table.

export interface DemandRow {
  checked_at: Date;
  /** Canonical URL when the target resolved or is a URL, else the name as given (trimmed). */
  target: string;
  server_url: string | null;
  name: string | null;
  verdict: string;
  kind: string;
  receipt_id: string | null;
  /**
   * Calls this row stands for (default 1): the demand buffer writes identical checks (same
   * receipt, target, verdict and kind) counted within one write as one row, dated by the last.
   */
  checks?: number;
}

export interface VerdictCounts {
  pass: number;
  uncertain: number;
  fail: number;
  unrated: number;
}

export interface DemandTotals extends VerdictCounts {
  total: number;
  unique_targets: number;
}

export interface DemandTarget extends VerdictCounts {
  target: string;
  server_url: string | null;
  name: string | null;
  checks: number;
  last_checked_at: Date;
  last_verdict: string;
}

/**
 * One row: every check ever counted, all time. The per-target sums (migration 1560) plus what the
 * demand retention retired (migration 1630): checks, distinct targets, the verdict mix and the
 * checks per kind. totals(null) and the market figures read it.
 */
export const ALL_TIME_DEMAND = `(SELECT t.checks + coalesce(r.checks, 0) AS checks, t.targets + coalesce(r.targets, 0) AS targets,
          t.pass + coalesce(r.pass, 0) AS pass, t.uncertain + coalesce(r.uncertain, 0) AS uncertain, t.fail + coalesce(r.fail, 0) AS fail,
          t.unrated + coalesce(r.unrated, 0) AS unrated, t.gateway + coalesce(r.gateway, 0) AS gateway, t.agent_query + coalesce(r.agent_query, 0) AS agent_query
     FROM (SELECT coalesce(sum(checks), 0)::int8 AS checks, count(DISTINCT target)::int8 AS targets, coalesce(sum(pass), 0)::int8 AS pass,
                  coalesce(sum(uncertain), 0)::int8 AS uncertain, coalesce(sum(fail), 0)::int8 AS fail, coalesce(sum(unrated), 0)::int8 AS unrated,
                  coalesce(sum(gateway), 0)::int8 AS gateway, coalesce(sum(agent_query), 0)::int8 AS agent_query
             FROM preflight_demand_targets) t
     LEFT JOIN preflight_demand_retired r ON r.id = 1)`;

const mix = (r: { pass: number | null; uncertain: number | null; fail: number | null; unrated: number | null }): VerdictCounts => ({
  pass: r.pass ?? 0,
  uncertain: r.uncertain ?? 0,
  fail: r.fail ?? 0,
  unrated: r.unrated ?? 0,
});

/** The multi-row INSERT of demand rows. */
export function insertDemandStatement(rows: readonly DemandRow[]): Statement {
  return [
    `INSERT INTO preflight_demand (checked_at, target, server_url, name, verdict, kind, receipt_id, checks)
     SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int4[])`,
    [
      rows.map((r) => r.checked_at.toISOString()),
      rows.map((r) => r.target),
      rows.map((r) => r.server_url),
      rows.map((r) => r.name),
      rows.map((r) => r.verdict),
      rows.map((r) => r.kind),
      rows.map((r) => r.receipt_id),
      rows.map((r) => r.checks ?? 1),
    ],
  ];
}

/** Demand rows counted in memory are written at least this often (a crash loses at most this much). */
export const DEMAND_FLUSH_MS = 1000;
/** Rows kept for a retry while the database refuses them; beyond it the oldest are dropped. */
const DEMAND_BUFFER_MAX = 100_000;
/**
 * A buffer this full is written at once rather than at the next DEMAND_FLUSH_MS tick: at 20,000
 * checks a second, one write a second would build a 20,000-row statement on the event loop in one
 * go (tens of milliseconds during which no answer goes out: the gate's p99), and smaller writes
 * spread that work between answers.
 */
export const DEMAND_WRITE_ROWS = 1000;

interface DemandBuffer {
  add(row: DemandRow): void;
  /** Writes every row added so far; resolves when they (and any write in flight) committed. */
  flush(): Promise<void>;
  /** Stops the periodic write and writes what is left. */
  close(): Promise<void>;
}

const buffers = new WeakMap<object, DemandBuffer>();
const demandRecorded = dbSignal();

/**
 * Calls `fn` whenever this process records demand through `db` (a row counted in the buffer, a
 * write committed): caches of demand figures settle, so a check shows in them within
 * AGGREGATE_SETTLE_MS (src/services/cached-figure.ts).
 */
export function onDemandRecorded(db: Queryable, fn: () => void): () => void {
  return demandRecorded.on(db, fn);
}

/** Tells onDemandRecorded's listeners of `db` that demand was counted or committed. */
export function notifyDemandRecorded(db: Queryable): void {
  demandRecorded.emit(db);
}

/** The row a counted check adds to: identical checks (same receipt, target, verdict, kind) share it. */
function demandKey(r: DemandRow): string {
  // \u0000 cannot occur in these texts (PostgreSQL text refuses it); \u0001 marks a null.
  return `${r.receipt_id ?? '\u0001'}\u0000${r.target}\u0000${r.server_url ?? '\u0001'}\u0000${r.name ?? '\u0001'}\u0000${r.verdict}\u0000${r.kind}`;
}

/** Adds `r` (its checks, its time when later) to the row of its key in `rows`. */
function countInto(rows: Map<string, DemandRow & { checks: number }>, r: DemandRow): void {
  const key = demandKey(r);
  const had = rows.get(key);
  if (had === undefined) {
    rows.set(key, Object.assign({}, r, { checks: r.checks ?? 1 }));
    return;
  }
  had.checks += r.checks ?? 1;
  if (r.checked_at > had.checked_at) had.checked_at = r.checked_at;
}

/**
 * Pre-flight demand, counted per call in memory and written every DEMAND_FLUSH_MS in one
 * multi-row INSERT (issue 22): the answer to a check no longer waits for its demand. Identical
 * checks counted between two writes (same receipt, target, verdict and kind: the calls that share
 * one claim's receipt) are written as one row with their number in `checks`, dated by the last of
 * them, so the table grows with claims rather than with calls; every call is still counted. A
 * crash loses at most the last DEMAND_FLUSH_MS of demand (docs/performance.md); reads of demand in
 * this process (demandStore) write the buffer first, so they always see their own calls.
 */
export function demandBuffer(db: Queryable, onError?: (err: unknown) => void): DemandBuffer {
  let b = buffers.get(db);
  if (b) return b;
  let rows = new Map<string, DemandRow & { checks: number }>();
  const inflight = new Set<Promise<void>>();
  let timer: NodeJS.Timeout | null = null;
  let closed = false;
  let soon = false;
  // After a failed write only the periodic tick retries (no write per added row against a database that is down).
  let failing = false;
  function write(): Promise<void> {
    if (rows.size === 0) return Promise.all(inflight).then(() => undefined);
    const batch = rows;
    rows = new Map();
    const p = db
      .query(...insertDemandStatement([...batch.values()]))
      .then(() => {
        failing = false;
        notifyDemandRecorded(db);
      })
      .catch((err: unknown) => {
        // Kept for the next write (bounded, oldest dropped first), reported, and the flush that asked fails.
        const kept = batch;
        for (const r of rows.values()) countInto(kept, r);
        for (const key of kept.keys()) {
          if (kept.size <= DEMAND_BUFFER_MAX) break;
          kept.delete(key);
        }
        rows = kept;
        failing = true;
        throw err;
      })
      .finally(() => inflight.delete(p));
    inflight.add(p);
    return Promise.all(inflight).then(() => undefined);
  }
  b = {
    add(row) {
      countInto(rows, row);
      notifyDemandRecorded(db);
      if (rows.size >= DEMAND_WRITE_ROWS && !soon && !failing && inflight.size === 0) {
        // Written after the answers of this event-loop turn went out.
        soon = true;
        setImmediate(() => {
          soon = false;
          if (rows.size >= DEMAND_WRITE_ROWS && inflight.size === 0) write().catch((err: unknown) => onError?.(err));
        });
      }
      if (!timer && !closed) {
        timer = setInterval(() => {
          if (rows.size === 0) return;
          write().catch((err: unknown) => onError?.(err));
        }, DEMAND_FLUSH_MS);
        timer.unref();
      }
    },
    flush: write,
    async close() {
      closed = true;
      if (timer) clearInterval(timer);
      timer = null;
      await write();
    },
  };
  buffers.set(db, b);
  return b;
}

/** Writes the demand rows this process counted through `db` (no-op when none is pending). */
export async function flushDemand(db: Queryable): Promise<void> {
  await buffers.get(db)?.flush();
}

/**
 * The sums a window reads: all time, the per-target sums (migration 1560); since a time, the
 * per-target hourly sums (migration 1630) from the statement parameter `sinceParam`, a UTC hour
 * (windowStart). Never the demand rows themselves: they grow with checks (a gateway: one per
 * upstream per second), the sums with distinct targets (per hour).
 */
function sums(since: Date | null, sinceParam: string, alias = 'w'): string {
  return since === null ? `preflight_demand_targets ${alias}` : `(SELECT * FROM preflight_demand_hourly WHERE bucket >= ${sinceParam}::timestamptz) ${alias}`;
}

/**
 * The first hourly sum of a window starting at `since`: the start of its UTC hour. Computed here,
 * not in SQL: date_trunc with a time zone is only STABLE, so a scan would evaluate it per row.
 */
export const windowStart = (since: Date): Date => new Date(Math.floor(since.getTime() / 3_600_000) * 3_600_000);

/** The statement parameter sums(since, ...) names: none all time, else the window's first hour. */
const windowParam = (since: Date | null): Date[] => (since === null ? [] : [windowStart(since)]);

/** One row per target checked in the window (all time when `since` is null): checks, last check and verdict, verdict mix. */
function groupedTargets(since: Date | null, sinceParam: string): string {
  return `SELECT target, max(nullif(server_url, '')) AS server_url, max(name) AS name, sum(checks)::int8 AS checks, max(last_checked_at) AS last_checked_at,
                 (array_agg(last_verdict ORDER BY last_checked_at DESC, last_id DESC))[1] AS last_verdict,
                 sum(pass)::int8 AS pass, sum(uncertain)::int8 AS uncertain, sum(fail)::int8 AS fail, sum(unrated)::int8 AS unrated
            FROM ${sums(since, sinceParam)} GROUP BY target`;
}

export function demandStore(db: Queryable) {
  return {
    async insert(r: DemandRow): Promise<void> {
      await db.query(
        'INSERT INTO preflight_demand (checked_at, target, server_url, name, verdict, kind, receipt_id, checks) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
        [r.checked_at, r.target, r.server_url, r.name, r.verdict, r.kind, r.receipt_id, r.checks ?? 1],
      );
      notifyDemandRecorded(db);
    },

    /** Several demand rows in one statement. */
    async insertMany(rows: readonly DemandRow[]): Promise<void> {
      if (rows.length === 0) return;
      await db.query(...insertDemandStatement(rows));
      notifyDemandRecorded(db);
    },

    /** Totals since a time (null: all time). */
    async totals(since: Date | null): Promise<DemandTotals> {
      await flushDemand(db);
      // All time: the per-target sums and what the retention retired; a window: its hourly sums
      // (migration 1630). Never every demand row (issue 23).
      const rows = await db.query<{ n: number; u: number; pass: number | null; uncertain: number | null; fail: number | null; unrated: number | null }>(
        since === null
          ? `SELECT checks AS n, targets AS u, pass, uncertain, fail, unrated FROM ${ALL_TIME_DEMAND} a`
          : `SELECT coalesce(sum(checks), 0)::int8 AS n, count(DISTINCT target)::int8 AS u, coalesce(sum(pass), 0)::int8 AS pass,
                    coalesce(sum(uncertain), 0)::int8 AS uncertain, coalesce(sum(fail), 0)::int8 AS fail, coalesce(sum(unrated), 0)::int8 AS unrated
               FROM ${sums(since, '$1')}`,
        windowParam(since),
      );
      const r = rows[0]!;
      return { total: r.n, unique_targets: r.u, ...mix(r) };
    },

    /** Most-checked targets since a time (null: all time), most checks first. */
    async topTargets(since: Date | null, limit: number): Promise<DemandTarget[]> {
      await flushDemand(db);
      const rows = await db.query<{
        target: string;
        server_url: string | null;
        name: string | null;
        checks: number;
        last_checked_at: Date;
        last_verdict: string;
        pass: number | null;
        uncertain: number | null;
        fail: number | null;
        unrated: number | null;
      }>(`${groupedTargets(since, '$2')} ORDER BY checks DESC, last_checked_at DESC, target LIMIT $1`, [limit, ...windowParam(since)]);
      return rows.map((r) => Object.assign({}, r, mix(r)));
    },

    /**
     * One page of the targets checked since a time (null: all time, from the per-target sums),
     * in topTargets' order (checks descending, last check descending, then target in code-unit
     * order), after the key `after` (checks, last check in microseconds since the epoch, target).
     */
    async topTargetsPage(since: Date | null, after: { checks: number; us: number; target: string } | null, limit: number): Promise<(DemandTarget & { last_us: number })[]> {
      await flushDemand(db);
      const grouped = groupedTargets(since, '$5');
      const rows = await db.query<DemandTarget & { last_us: number; pass: number | null; uncertain: number | null; fail: number | null; unrated: number | null }>(
        `SELECT g.*, g.us AS last_us FROM (SELECT x.*, (extract(epoch FROM x.last_checked_at) * 1000000)::int8 AS us FROM (${grouped}) x) g
          WHERE $2::int8 IS NULL OR g.checks < $2::int8 OR (g.checks = $2::int8 AND (g.us < $3::int8 OR (g.us = $3::int8 AND g.target COLLATE "C" > $4::text COLLATE "C")))
          ORDER BY g.checks DESC, g.us DESC, g.target COLLATE "C" LIMIT $1`,
        [limit, after?.checks ?? null, after?.us ?? null, after?.target ?? null, ...windowParam(since)],
      );
      return rows.map(({ us: _us, ...r }: typeof rows[number] & { us?: number }) => Object.assign(r, { checks: Number(r.checks), last_us: Number(r.last_us) }, mix(r)));
    },

    /**
     * Pre-flight checks per category of the tracked server they named (category null: targets not
     * tracked, all time including the retired targets, which never named a tracked server), most
     * checks first, then by category (untracked last).
     */
    async checksByCategory(since: Date | null): Promise<{ category: string | null; checks: number }[]> {
      await flushDemand(db);
      return db.query<{ category: string | null; checks: number }>(
        `SELECT category, sum(checks)::int8 AS checks
           FROM (SELECT s.category, d.checks FROM ${sums(since, '$1', 'd')} LEFT JOIN servers s ON s.url = nullif(d.server_url, '')
                 ${since === null ? 'UNION ALL SELECT NULL, checks FROM preflight_demand_retired' : ''}) x
          GROUP BY category ORDER BY checks DESC, category NULLS LAST`,
        windowParam(since),
      );
    },

    /**
     * Retires up to `limit` targets none of whose sums names a tracked server (an untracked URL,
     * a name that resolved to nothing) and that were last checked before `cutoff`, after the
     * target `after` (in the sums' key order): their sums move into preflight_demand_retired in
     * the same statement, so every all-time total keeps counting them. A sum a concurrent check
     * just updated is re-checked by the DELETE and kept. Answers how many targets it picked
     * (fewer than `limit`: none are left after `after`), how many of them went, and the last one
     * picked (the next call's `after`).
     */
    async retireTargets(cutoff: Date, after: string | null, limit: number): Promise<{ picked: number; retired: number; last: string | null }> {
      const [r] = await db.query<{ picked: number; retired: number; last: string | null }>(
        `WITH old AS (
           SELECT t.target FROM preflight_demand_targets t LEFT JOIN servers s ON s.url = t.server_url
            WHERE $3::text IS NULL OR t.target > $3::text
            GROUP BY t.target HAVING count(s.url) = 0 AND max(t.last_checked_at) < $1::timestamptz
            ORDER BY t.target LIMIT $2
         ), gone AS (
           DELETE FROM preflight_demand_targets t USING old
            WHERE t.target = old.target AND t.last_checked_at < $1::timestamptz AND NOT EXISTS (SELECT 1 FROM servers s WHERE s.url = t.server_url)
           RETURNING t.target, t.checks, t.pass, t.uncertain, t.fail, t.unrated, t.gateway, t.agent_query
         ), added AS (
           INSERT INTO preflight_demand_retired AS r (id, targets, checks, pass, uncertain, fail, unrated, gateway, agent_query)
           SELECT 1, count(DISTINCT target), coalesce(sum(checks), 0), coalesce(sum(pass), 0), coalesce(sum(uncertain), 0),
                  coalesce(sum(fail), 0), coalesce(sum(unrated), 0), coalesce(sum(gateway), 0), coalesce(sum(agent_query), 0)
             FROM gone
           ON CONFLICT (id) DO UPDATE SET targets = r.targets + EXCLUDED.targets, checks = r.checks + EXCLUDED.checks,
             pass = r.pass + EXCLUDED.pass, uncertain = r.uncertain + EXCLUDED.uncertain, fail = r.fail + EXCLUDED.fail,
             unrated = r.unrated + EXCLUDED.unrated, gateway = r.gateway + EXCLUDED.gateway, agent_query = r.agent_query + EXCLUDED.agent_query
           RETURNING 1
         )
         SELECT (SELECT count(*) FROM old)::int8 AS picked, (SELECT count(DISTINCT target) FROM gone)::int8 AS retired, (SELECT max(target) FROM old) AS last`,
        [cutoff, limit, after],
      );
      return { picked: Number(r!.picked), retired: Number(r!.retired), last: r!.last };
    },

    /** Deletes up to `limit` hourly sums of hours that ended by `cutoff` (oldest first); how many. */
    async deleteHourlyBefore(cutoff: Date, limit: number): Promise<number> {
      const rows = await db.query<{ n: number }>(
        `WITH gone AS (
           DELETE FROM preflight_demand_hourly WHERE (bucket, target, server_url, shard) IN (
             SELECT bucket, target, server_url, shard FROM preflight_demand_hourly WHERE bucket <= $1::timestamptz ORDER BY bucket LIMIT $2)
           RETURNING 1
         ) SELECT count(*)::int8 AS n FROM gone`,
        [new Date(cutoff.getTime() - 3_600_000), limit],
      );
      return Number(rows[0]!.n);
    },

    /** Deletes up to `limit` demand rows checked before `cutoff` (oldest first); how many. */
    async deleteRowsBefore(cutoff: Date, limit: number): Promise<number> {
      const rows = await db.query<{ n: number }>(
        `WITH gone AS (
           DELETE FROM preflight_demand WHERE id IN (SELECT id FROM preflight_demand WHERE checked_at < $1::timestamptz ORDER BY checked_at LIMIT $2)
           RETURNING 1
         ) SELECT count(*)::int8 AS n FROM gone`,
        [cutoff, limit],
      );
      return Number(rows[0]!.n);
    },
  };
}

export type DemandStore = ReturnType<typeof demandStore>;
