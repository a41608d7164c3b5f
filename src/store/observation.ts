import type { Queryable } from '../db/index.js';
import { settleRollups } from './rollup-aggregator.js';

/** A server claimed for one probe. */
export interface ClaimedServer {
  id: number;
  url: string;
  name: string;
  category: string;
  /** streamable-http or sse; null means streamable-http (servers tracked through telemetry). */
  transport: string | null;
}

export type ProbeOutcomeKind = 'ok' | 'failed' | 'timeout' | 'auth_required' | 'unresolved' | 'refused';

export interface ScheduleRow {
  server_id: number;
  next_due_at: Date;
  claimed_by: string | null;
  claimed_at: Date | null;
  last_probe_at: Date | null;
  last_outcome: ProbeOutcomeKind | null;
  last_detail: string | null;
  last_latency_ms: number | null;
  probes: number;
  consecutive_failures: number;
}

const MINUTE_MS = 60_000;

/**
 * The family of a stored report source, in SQL: the same mapping as sourceFamily in
 * src/domain/scoring.ts (addr:X and key:...@X are the family net:X; a key without a family and
 * anything else are their own).
 */
export const SOURCE_FAMILY_SQL = `CASE WHEN source LIKE 'addr:%' THEN 'net:' || substr(source, 6)
  WHEN source LIKE 'key:%@%' THEN 'net:' || split_part(source, '@', 2) ELSE source END`;

/** The observation schedule and the global probe budget (tables observation_schedule, observation_budget). */
export function observationStore(db: Queryable) {
  return {
    /** Puts a server on the schedule, due at `dueAt`, unless it already is. */
    async schedule(serverId: number, dueAt: Date): Promise<void> {
      await db.query('INSERT INTO observation_schedule (server_id, next_due_at) VALUES ($1, $2) ON CONFLICT (server_id) DO NOTHING', [serverId, dueAt]);
    },

    /** schedule for many servers in one statement. */
    async scheduleMany(serverIds: readonly number[], dueAt: Date): Promise<void> {
      if (serverIds.length === 0) return;
      await db.query('INSERT INTO observation_schedule (server_id, next_due_at) SELECT unnest($1::int8[]), $2::timestamptz ON CONFLICT (server_id) DO NOTHING', [serverIds, dueAt]);
    },

    /**
     * Brings the schedule in line with who may be observed (docs/observation.md "What is
     * observed"): catalogue servers, and servers with evidence from at least `minSources`
     * independent source families updated since `since`. Eligible servers not on the schedule
     * join it due at `dueAt`; servers no longer eligible leave it, and so do servers the MCP
     * Registry deleted (docs/observation.md "Registry sync"). One statement.
     */
    async syncSchedule(dueAt: Date, o: { minSources: number; since: Date }): Promise<{ added: number; removed: number }> {
      await settleRollups(db);
      const [r] = await db.query<{ added: number; removed: number }>(
        `WITH candidates AS (
           SELECT id AS server_id FROM servers WHERE catalogued_at IS NOT NULL
           UNION
           SELECT server_id FROM trust_evidence
            WHERE updated_at >= $2 AND source NOT LIKE 'observatory:%'
            GROUP BY server_id HAVING count(DISTINCT ${SOURCE_FAMILY_SQL}) >= $3
         ), eligible AS (
           SELECT c.server_id FROM candidates c JOIN servers s ON s.id = c.server_id
            WHERE s.registry_status IS DISTINCT FROM 'deleted'
         ), added AS (
           INSERT INTO observation_schedule (server_id, next_due_at) SELECT server_id, $1::timestamptz FROM eligible
           ON CONFLICT (server_id) DO NOTHING RETURNING server_id
         ), removed AS (
           DELETE FROM observation_schedule o WHERE NOT EXISTS (SELECT 1 FROM eligible e WHERE e.server_id = o.server_id) RETURNING server_id
         )
         SELECT (SELECT count(*) FROM added)::int AS added, (SELECT count(*) FROM removed)::int AS removed`,
        [dueAt, o.since, o.minSources],
      );
      return r!;
    },

    /** See claimDue; call on a transaction's Queryable. */
    claimDue: (o: ClaimOptions) => claimDue(db, o),
    recordProbe: (serverId: number, r: ProbeRecord) => recordProbe(db, serverId, r),
    /** The schedule rows of the given servers (all when null). */
    rows: (serverIds: readonly number[] | null = null) => scheduleRows(db, serverIds),
  };
}

export interface ClaimOptions {
  at: Date;
  intervalMs: number;
  instance: string;
  max: number;
  ratePerMinute: number;
}

export interface ProbeRecord {
  at: Date;
  outcome: ProbeOutcomeKind;
  detail: string | null;
  latencyMs: number | null;
}

/**
 * Claims up to `max` due servers for `instance` (call inside a transaction). The minute's budget
 * row is locked first, so concurrent claimers never start more than `ratePerMinute` probes in a
 * minute between them; due rows are taken with FOR UPDATE SKIP LOCKED and moved one interval
 * ahead in the same statement, so another instance never claims the same server this interval.
 */
async function claimDue(
  tx: Queryable,
  o: ClaimOptions,
): Promise<{ claimed: ClaimedServer[]; budgetLeft: number }> {
  const minute = new Date(Math.floor(o.at.getTime() / MINUTE_MS) * MINUTE_MS);
  await tx.query('INSERT INTO observation_budget (minute, used) VALUES ($1, 0) ON CONFLICT (minute) DO NOTHING', [minute]);
  const [budget] = await tx.query<{ used: number }>('SELECT used FROM observation_budget WHERE minute = $1 FOR UPDATE', [minute]);
  const left = o.ratePerMinute - (budget?.used ?? 0);
  const n = Math.min(o.max, left);
  if (n <= 0) return { claimed: [], budgetLeft: Math.max(0, left) };
  const claimed = await tx.query<ClaimedServer>(
    `WITH due AS (
       SELECT server_id FROM observation_schedule WHERE next_due_at <= $1 ORDER BY next_due_at, server_id LIMIT $2 FOR UPDATE SKIP LOCKED
     ), moved AS (
       UPDATE observation_schedule o SET next_due_at = $3, claimed_by = $4, claimed_at = $1 FROM due WHERE o.server_id = due.server_id RETURNING o.server_id
     )
     SELECT s.id, s.url, s.name, s.category, s.transport FROM moved JOIN servers s ON s.id = moved.server_id ORDER BY s.id`,
    [o.at, n, new Date(o.at.getTime() + o.intervalMs), o.instance],
  );
  if (claimed.length > 0) {
    await tx.query('UPDATE observation_budget SET used = used + $2 WHERE minute = $1', [minute, claimed.length]);
    // Old budget rows are of no use; the claimer that opens a new minute clears them.
    if ((budget?.used ?? 0) === 0) await tx.query("DELETE FROM observation_budget WHERE minute < $1::timestamptz - interval '1 hour'", [minute]);
  }
  return { claimed, budgetLeft: left - claimed.length };
}

/** Records the outcome of one probe on the schedule row. */
async function recordProbe(
  db: Queryable,
  serverId: number,
  r: ProbeRecord,
): Promise<void> {
  const failed = r.outcome === 'failed' || r.outcome === 'timeout';
  await db.query(
    `UPDATE observation_schedule SET last_probe_at = $2, last_outcome = $3, last_detail = $4, last_latency_ms = $5, probes = probes + 1,
       consecutive_failures = CASE WHEN $6 THEN consecutive_failures + 1 ELSE 0 END
     WHERE server_id = $1`,
    [serverId, r.at, r.outcome, r.detail === null ? null : r.detail.slice(0, 500), r.latencyMs, failed],
  );
}

async function scheduleRows(db: Queryable, serverIds: readonly number[] | null = null): Promise<ScheduleRow[]> {
  return db.query<ScheduleRow>(
    `SELECT server_id, next_due_at, claimed_by, claimed_at, last_probe_at, last_outcome, last_detail, last_latency_ms, probes, consecutive_failures
       FROM observation_schedule WHERE $1::int8[] IS NULL OR server_id = ANY($1::int8[]) ORDER BY server_id`,
    [serverIds],
  );
}
