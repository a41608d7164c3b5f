// Read replicas (DATABASE_READ_URL, docs/deployment.md "Read replicas"). Reads that tolerate a
// bounded staleness (ranked lists, stats, pages) go to a streaming replica while it is at most
// DATABASE_READ_MAX_LAG_MS behind the primary; writes, transactions and every other read (those
// that must see what this process just wrote) stay on the primary.
//
// How far behind the replica is, without writing anything: every poll samples the primary's WAL
// position (pg_current_wal_lsn) with the time it was taken, then asks the replica how far it has
// replayed (pg_last_wal_replay_lsn). Once the replica has replayed past a sample, everything the
// primary committed before that sample's time is visible on the replica, so its staleness is at
// most now minus that time. A replica that stops replaying (paused, broken stream) therefore
// ages out at the bound by itself; one that cannot be reached is dropped at once and retried at
// the next poll. A read the replica fails for a connection reason or a recovery conflict runs on
// the primary instead.
import { isConnectionError, type DatabaseTimeouts, type Db, type Queryable, type QueryOptions, type Row } from './db.js';
import { openPostgres } from './postgres.js';

export interface ReplicaState {
  /** The replica answers and is a standby. */
  reachable: boolean;
  /** Upper bound of its staleness now (ms), null when unknown (never caught up, unreachable). */
  lagMs: number | null;
  /** Reads that tolerate staleness go to it now. */
  serving: boolean;
  /** Why not, when not serving: unreachable, not a standby, lagging, starting. */
  reason: string | null;
}

export interface ReadRouter extends Queryable {
  state(): ReplicaState;
  /** Reads answered by the replica and by the primary (fallbacks included), since start. */
  counts(): { replica: number; primary: number; fallbacks: number };
  /** Samples now (tests and start-up); the poll does this every pollMs. */
  poll(): Promise<void>;
  close(): Promise<void>;
}

/** pg_lsn text (X/Y, hex) as a bigint. */
export function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/** SQLSTATE of "canceling statement due to conflict with recovery" (and serialization failures). */
const RECOVERY_CONFLICT = '40001';

export function createReadRouter(
  primary: Queryable,
  replicaUrl: string,
  opts: { maxLagMs: number; pollMs?: number; poolMax?: number; prepared?: boolean; timeouts?: Partial<DatabaseTimeouts> },
): ReadRouter {
  // The replica's connections run under the same bounds as the primary's (statement, lock and
  // idle-in-transaction timeouts, the client's read timeout, keep-alive): a replica that stops
  // answering fails its reads (which then run on the primary) instead of holding them.
  const replica = openPostgres(replicaUrl, { max: opts.poolMax ?? 10, connectionTimeoutMillis: 1000, guard: false, prepared: opts.prepared, timeouts: opts.timeouts });
  const pollMs = opts.pollMs ?? Math.max(50, Math.min(250, Math.floor(opts.maxLagMs / 4)));
  // Primary WAL positions with their (monotonic) times, oldest first; only samples the replica has
  // not yet passed are kept, plus the newest one it has.
  let samples: { at: number; lsn: bigint }[] = [];
  let caughtUpAt: number | null = null;
  let reachable = false;
  let reason: string | null = 'starting';
  const n = { replica: 0, primary: 0, fallbacks: 0 };

  async function poll(): Promise<void> {
    let sample: { at: number; lsn: bigint };
    try {
      const at = performance.now();
      const [p] = await primary.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      sample = { at, lsn: parseLsn(p!.lsn) };
    } catch {
      return; // the primary is away: nothing to compare with; reads fail or succeed on their own
    }
    samples.push(sample);
    try {
      const [r] = await replica.query<{ standby: boolean; lsn: string | null }>('SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS lsn');
      if (!r!.standby || r!.lsn === null) {
        reachable = false;
        reason = 'not a standby';
        caughtUpAt = null;
        samples = [];
        return;
      }
      reachable = true;
      const replayed = parseLsn(r!.lsn);
      let passed = -1;
      for (let i = 0; i < samples.length; i++) if (samples[i]!.lsn <= replayed) passed = i;
      if (passed >= 0) {
        caughtUpAt = Math.max(caughtUpAt ?? 0, samples[passed]!.at);
        samples = samples.slice(passed + 1);
      }
      // A replica that never catches up must not grow the list without bound.
      if (samples.length > 10_000) samples = samples.slice(-5_000);
      reason = null;
    } catch (err) {
      markDown(err);
    }
  }

  function markDown(err: unknown): void {
    reachable = false;
    caughtUpAt = null;
    samples = [];
    reason = `unreachable: ${(err as Error)?.message ?? String(err)}`;
  }

  function state(): ReplicaState {
    const lagMs = reachable && caughtUpAt !== null ? Math.round(performance.now() - caughtUpAt) : null;
    const serving = lagMs !== null && lagMs <= opts.maxLagMs;
    const why = serving ? null : (reason ?? (lagMs === null ? 'starting' : `lagging ${lagMs} ms behind (bound ${opts.maxLagMs} ms)`));
    return { reachable, lagMs, serving, reason: why };
  }

  let timer: NodeJS.Timeout | null = setInterval(() => {
    if (polling) return;
    polling = poll().finally(() => {
      polling = null;
    });
  }, pollMs);
  timer.unref();
  let polling: Promise<void> | null = poll().finally(() => {
    polling = null;
  });

  return {
    async query<T = Row>(sql: string, params?: readonly unknown[], qopts?: QueryOptions): Promise<T[]> {
      if (state().serving) {
        try {
          const rows = await replica.query<T>(sql, params, qopts);
          n.replica++;
          return rows;
        } catch (err) {
          if (isConnectionError(err)) markDown(err);
          else if ((err as { code?: string })?.code !== RECOVERY_CONFLICT) throw err;
          n.fallbacks++;
        }
      }
      n.primary++;
      return primary.query<T>(sql, params, qopts);
    },
    state,
    counts: () => ({ ...n }),
    async poll() {
      await polling;
      await poll();
    },
    async close() {
      if (timer) clearInterval(timer);
      timer = null;
      await polling;
      await replica.close();
    },
  };
}

/**
 * The primary `db` with a replica for stale-tolerant reads: the same Db (everything goes to the
 * primary), plus `staleReads` routed as above; closing it closes both pools.
 */
export function withReadReplica(
  db: Db,
  replicaUrl: string,
  opts: { maxLagMs: number; pollMs?: number; prepared?: boolean; timeouts?: Partial<DatabaseTimeouts> },
): Db & { staleReads: ReadRouter } {
  const router = createReadRouter(db, replicaUrl, opts);
  return {
    ...db,
    staleReads: router,
    async close() {
      await router.close();
      await db.close();
    },
  };
}

/** Where reads that tolerate the staleness bound go: the replica router when there is one, else the primary. */
export function staleReads(db: Queryable): Queryable {
  return (db as { staleReads?: Queryable }).staleReads ?? db;
}
