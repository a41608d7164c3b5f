// The rollup aggregator (issue 22): ingestion's acknowledged write is the raw append only
// (telemetryStore.append, one multi-row INSERT); this folds committed raw rows into the rollups
// the scores read (server_totals, telemetry_hourly, trust_evidence).
//
// The watermark. Every raw row carries the 64-bit id of the transaction that inserted it
// (telemetry.xid). A pass takes a PostgreSQL snapshot: every transaction id below its xmax that
// is not in its xip list has finished, so the rows of those transactions are final (committed,
// or gone with a rollback). The watermark row (rollup_watermark) says "every row whose xid is
// below `horizon` and not in `pending` has been folded, exactly once". A pass folds the rows
// that became final since: xid in [horizon, xmax) minus the still-running ones, plus the rows of
// formerly pending transactions that have finished. Raw ids alone could not carry this: two
// appends take ids 10 and 11 and may commit 11 first (docs/performance.md).
//
// One pass at a time across the cluster: a pass is one transaction holding an advisory lock
// (released by the database if the process dies, or ends an idle transaction: a paused instance
// holds it at most DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS). The lock is tried, never waited for
// in the database (pg_try_advisory_xact_lock): while another instance folds, a pass polls for it
// (no pooled connection held) for at most PASS_LOCK_WAIT_MS, then gives up as `busy`. The fold and the
// watermark update are in that one transaction, so a crash at any point (before, during or
// between them) leaves both as they were and the next pass folds the same rows once
// (test/rollup-aggregator.test.ts kills a process between the fold and the watermark).
//
// Read-your-writes. In one process, reads of the rollups (telemetryStore, scores, evidence)
// first call settleRollups(db): when this process appended rows since the last complete pass
// began, the read waits for (or runs) a pass that began after them. Across instances the rows
// are folded by the next pass of any instance: every serving instance runs one every
// ROLLUP_INTERVAL_MS (250 ms), so an acknowledged report reaches the rollups within that
// interval plus one pass, even when the instance that took it died right after answering.
// The wait is bounded: a read whose rollups are not settled within ROLLUP_SETTLE_MAX_MS (another
// instance paused while folding, a database that stalls) is answered 503 with Retry-After
// instead of waiting (docs/reliability.md "Reads that wait for the rollups").
import type { Db, Queryable } from '../db/index.js';
import { ObservatoryError } from '../errors.js';
import { BoundedMap } from './cache-limits.js';
import { foldStatement, notifyServersChanged } from './telemetry.js';

/** Period of the background pass on every serving instance. */
export const ROLLUP_INTERVAL_MS = 250;
/** Most raw rows folded by one pass (a backlog after downtime is folded over several passes). */
export const FOLD_MAX_ROWS = 20_000;
/** Advisory lock key of the aggregator (one pass at a time across instances). */
const AGGREGATOR_LOCK = 7_220_001;
/** Longest a read waits for the rollups to take in what this process appended; then 503 (Retry-After). */
export const ROLLUP_SETTLE_MAX_MS = 5_000;
/** Longest a pass polls for the lock another instance's pass holds before giving up (busy). */
export const PASS_LOCK_WAIT_MS = 5_000;
/** Polling of a held lock: first retry after this long, doubling up to LOCK_POLL_MAX_MS. */
const LOCK_POLL_MIN_MS = 10;
const LOCK_POLL_MAX_MS = 100;

export interface PassResult {
  /** Raw rows folded by this pass. */
  folded: number;
  /** False when FOLD_MAX_ROWS cut the pass short (another pass follows at once), or when it did not run (busy). */
  complete: boolean;
  /** True when it did not run: another instance's pass held the lock for PASS_LOCK_WAIT_MS. */
  busy?: boolean;
}

const BUSY: PassResult = Object.freeze({ folded: 0, complete: false, busy: true });
const TIMED_OUT = Symbol('timed out');

/** `p`, or TIMED_OUT when it has not settled within `ms` (p keeps running; its outcome is handled by its owner). */
function beforeDeadline<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(resolve, ms, TIMED_OUT);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A read that could not be given what this process stored (it was stored: a retry shows it). */
function notSettled(ms: number): ObservatoryError {
  return new ObservatoryError('unavailable', `the latest reports are not yet in the scores after ${ms} ms (another instance is folding them, or the database is slow); retry shortly`, {
    headers: { 'retry-after': '2' },
  });
}

export interface AggregatorHooks {
  /** Most raw rows folded by one pass (default FOLD_MAX_ROWS; tests use a small one). */
  foldMaxRows?: number;
  /** Test hook: runs inside the pass transaction after the fold statement, before the watermark update. */
  afterFold?(): Promise<void> | void;
  /** Longest a read waits for the rollups (default ROLLUP_SETTLE_MAX_MS; tests use a small one). */
  settleMaxMs?: number;
}

interface Aggregator {
  /** This process committed an append on this database (of the given servers' rows; none given: any server's). */
  appended(serverIds?: Iterable<number>): void;
  /**
   * Resolves once a complete pass that began after every append this process committed so far
   * has committed; with `serverIds`, only after the appends of those servers' rows (a read of
   * a few servers does not wait for passes covering everyone else's reports). Rejects with a
   * 503 ObservatoryError when that has not happened within ROLLUP_SETTLE_MAX_MS.
   */
  settle(serverIds?: readonly number[]): Promise<void>;
  /** Runs one pass now (after any pass in flight); `busy` when another instance's pass held the lock past PASS_LOCK_WAIT_MS. */
  pass(): Promise<PassResult>;
  /** Starts the background pass (every intervalMs); errors go to onError. */
  start(intervalMs: number, onError: (err: unknown) => void): void;
  /** Stops the background pass (after as many stops as starts), waits for the pass in flight, then folds what this process appended. */
  stop(): Promise<void>;
}

const registry = new WeakMap<object, Aggregator>();

function isDb(q: Queryable): q is Db {
  return typeof (q as Db).transaction === 'function' && typeof (q as Db).kind === 'string';
}

/** The aggregator of this database handle (one per handle and process). */
export function rollupAggregator(db: Db, hooks: AggregatorHooks = {}): Aggregator {
  let a = registry.get(db);
  if (!a) registry.set(db, (a = createAggregator(db, hooks)));
  return a;
}

/** Called by telemetryStore after an append committed (with the servers whose rows it held, when known). */
export function rollupsAppended(q: Queryable, serverIds?: Iterable<number>): void {
  if (isDb(q)) rollupAggregator(q).appended(serverIds);
}

/**
 * Waits until the rollups include every append this process committed through `q` (no-op when
 * none is pending); with `serverIds`, every append of those servers' rows. Reads of a few servers
 * pass their ids, reads over categories or everything do not.
 */
export async function settleRollups(q: Queryable, serverIds?: readonly number[]): Promise<void> {
  const a = registry.get(q);
  if (a) await a.settle(serverIds);
}

const toBig = (v: unknown) => BigInt(String(v));

function createAggregator(db: Db, hooks: AggregatorHooks): Aggregator {
  const foldMaxRows = hooks.foldMaxRows ?? FOLD_MAX_ROWS;
  const settleMaxMs = hooks.settleMaxMs ?? ROLLUP_SETTLE_MAX_MS;
  let appendSeq = 0;
  let coveredSeq = 0;
  // The sequence number of each server's latest append (bounded). A server evicted from it, or
  // never in it, last appended at or before `forgottenUpTo` (entries are in append order), which
  // is what a read of it then waits for: never less than the truth.
  let forgottenUpTo = 0;
  const lastAppend = new BoundedMap<number, number>(undefined, (_id, seq) => {
    forgottenUpTo = Math.max(forgottenUpTo, seq);
  });
  let inflight: Promise<PassResult> | null = null;
  let queued: Promise<PassResult> | null = null;
  let timer: NodeJS.Timeout | null = null;
  // Several services on one handle in one process (tests of two instances on PGlite) share the timer.
  let starts = 0;

  /** One pass; while another instance's pass holds the lock, polls for it up to PASS_LOCK_WAIT_MS (then BUSY). */
  async function runPass(): Promise<PassResult> {
    const deadline = performance.now() + PASS_LOCK_WAIT_MS;
    let pause = LOCK_POLL_MIN_MS;
    for (;;) {
      const r = await tryPass();
      if (r !== null) return r;
      const left = deadline - performance.now();
      if (left <= 0) return BUSY;
      await sleep(Math.min(pause, left));
      pause = Math.min(pause * 2, LOCK_POLL_MAX_MS);
    }
  }

  /** One pass if the lock is free now; null when another instance's pass holds it (nothing done, no wait in the database). */
  async function tryPass(): Promise<PassResult | null> {
    const startSeq = appendSeq;
    const out = await db.transaction(async (tx) => {
      const [lock] = await tx.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS ok', [AGGREGATOR_LOCK]);
      if (!lock?.ok) return null;
      const [wm] = await tx.query<{ horizon: string; pending: string[] }>(
        "SELECT horizon::text AS horizon, pending::text[] AS pending FROM rollup_watermark WHERE name = 'rollups'",
      );
      if (!wm) throw new Error('rollup_watermark has no row: migrations incomplete');
      const [snap] = await tx.query<{ xmax: string; xip: string[] }>(
        'SELECT pg_snapshot_xmax(s)::text AS xmax, ARRAY(SELECT x::text FROM pg_snapshot_xip(s) x) AS xip FROM (SELECT pg_current_snapshot() AS s) q',
      );
      const horizon = toBig(wm.horizon);
      const prevPending = wm.pending.map(toBig);
      const xmax = toBig(snap!.xmax);
      const xip = new Set(snap!.xip.map(toBig));
      const pendingDone = prevPending.filter((x) => !xip.has(x));
      // The rows that became final: [horizon, xmax) minus the running transactions, plus the
      // formerly pending ones that have finished. Counted per transaction first, to cut the pass
      // at a transaction boundary (the watermark counts transactions: each is folded whole).
      const finalRows = '((xid >= $1 AND xid < $2) OR xid = ANY($3::int8[])) AND xid <> ALL($4::int8[])';
      const finalParams = [horizon.toString(), xmax.toString(), pendingDone.map(String), [...xip].map(String)];
      const perXid = await tx.query<{ xid: string; n: number }>(
        `SELECT xid::text AS xid, count(*)::int AS n FROM telemetry WHERE ${finalRows} GROUP BY xid ORDER BY xid`,
        finalParams,
      );
      let newHorizon = xmax;
      let complete = true;
      // Finished transactions below the horizon whose rows this pass leaves for the next one.
      let leftPending: bigint[] = [];
      let where = finalRows;
      let params: unknown[] = finalParams;
      // The first transaction always (one larger than the bound is folded alone), then the
      // following ones while the bound allows.
      let take = 0;
      for (let n = 0; take < perXid.length && (take === 0 || n + perXid[take]!.n <= foldMaxRows); take++) n += perXid[take]!.n;
      if (take < perXid.length) {
        complete = false;
        const upTo = toBig(perXid[take]!.xid);
        where = `${finalRows} AND xid < $5`;
        params = [...finalParams, upTo.toString()];
        // Every transaction below upTo is folded; a cut below the horizon (in the formerly pending
        // ones) leaves the horizon where it was and the rest of them pending.
        newHorizon = upTo > horizon ? upTo : horizon;
        leftPending = pendingDone.filter((x) => x >= upTo);
      }
      const newPending = [...[...xip].filter((x) => prevPending.includes(x) || (x >= horizon && x < newHorizon)), ...leftPending].sort((a, b) =>
        a < b ? -1 : a > b ? 1 : 0,
      );
      let folded: { folded: number; max_id: string; server_ids: (string | number)[] } = { folded: 0, max_id: '0', server_ids: [] };
      if (take > 0) folded = (await tx.query<typeof folded>(...foldStatement(where, params)))[0]!;
      await hooks.afterFold?.();
      const pendingChanged = newPending.length !== prevPending.length || newPending.some((x, i) => x !== prevPending[i]);
      if (folded.folded > 0 || pendingChanged) {
        await tx.query(
          `UPDATE rollup_watermark SET horizon = $1, pending = $2::int8[], max_raw_id = greatest(max_raw_id, $3::int8),
                  folded_rows = folded_rows + $4::int8, folded_at = now() WHERE name = 'rollups'`,
          [newHorizon.toString(), newPending.map(String), folded.max_id, folded.folded],
        );
      }
      // With nothing folded and nothing pending changed, the horizon is left where it was (no write,
      // no commit to flush): the next pass scans [horizon, xmax) again, an empty index range.
      return { result: { folded: folded.folded, complete }, serverIds: folded.server_ids.map(Number) };
    });
    if (out === null) return null;
    const { result, serverIds } = out;
    if (result.complete && startSeq > coveredSeq) coveredSeq = startSeq;
    // Scores computed from the rollups before this pass are stale now (rows of other instances included).
    if (serverIds.length > 0) notifyServersChanged(db, serverIds);
    return result;
  }

  /** A pass that begins after the one in flight (shared by every caller until it begins). */
  function requestPass(): Promise<PassResult> {
    if (queued) return queued;
    const before = inflight ?? Promise.resolve(null);
    const p: Promise<PassResult> = before
      .catch(() => null)
      .then(() => {
        queued = null;
        const run = runPass();
        inflight = run;
        void run.then(
          () => {
            if (inflight === run) inflight = null;
          },
          () => {
            if (inflight === run) inflight = null;
          },
        );
        return run;
      });
    queued = p;
    return p;
  }

  return {
    appended(serverIds) {
      appendSeq++;
      if (serverIds === undefined) {
        // Rows of unknown servers (another instance's, from a notification): every read waits.
        forgottenUpTo = appendSeq;
        return;
      }
      // Each server evicted by a set raises forgottenUpTo (onEvict above), however many go.
      for (const id of serverIds) lastAppend.set(id, appendSeq);
    },
    async settle(serverIds) {
      let target = appendSeq;
      if (serverIds !== undefined) {
        target = forgottenUpTo;
        for (const id of serverIds) target = Math.max(target, lastAppend.get(id) ?? 0);
      }
      if (coveredSeq >= target) return;
      // Bounded: a pass that cannot run (another instance paused holding the lock) or does not end
      // (a stalled database) makes this read a 503, not a wait for as long as that lasts.
      const deadline = performance.now() + settleMaxMs;
      while (coveredSeq < target) {
        const left = deadline - performance.now();
        if (left <= 0 || (await beforeDeadline(requestPass(), left)) === TIMED_OUT) throw notSettled(settleMaxMs);
      }
    },
    pass: requestPass,
    start(intervalMs, onError) {
      starts++;
      if (timer) return;
      let busy = false;
      // A cut-short pass is followed at once by the next one. Made once, not per tick: tsx names
      // every closure assigned to a name when it is made (test/hot-path-names.test.ts counts them).
      const passes = async () => {
        // Until complete; a busy pass (another instance folds: it folds every instance's rows) ends the tick.
        for (;;) {
          const r = await requestPass();
          if (r.complete || r.busy) return;
        }
      };
      const tick = () => {
        if (busy) return;
        busy = true;
        passes()
          .catch(onError)
          .finally(() => {
            busy = false;
          });
      };
      timer = setInterval(tick, intervalMs);
      timer.unref();
      // At once too: rows another instance acknowledged before it died are folded at start-up.
      tick();
    },
    async stop() {
      if (starts > 0) starts--;
      if (starts === 0 && timer) {
        clearInterval(timer);
        timer = null;
      }
      await (queued ?? inflight)?.catch(() => undefined);
      // What this process acknowledged is folded before it lets go of the database (another
      // instance, or this one after a restart, would fold it anyway); so is whatever else is
      // committed and unfolded (a stopping instance leaves the rollups complete).
      await this.settle().catch(() => undefined);
      if (starts === 0) {
        try {
          for (;;) {
            const r = await requestPass();
            if (r.complete || r.busy) break;
          }
        } catch {
          // The database is going away; the next instance folds the rest.
        }
      }
    },
  };
}
