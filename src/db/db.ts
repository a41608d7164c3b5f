// One small query interface over pg.Pool and embedded PGlite. Everything above this layer
// sees the same types from both: int8 and numeric arrive as JS numbers, timestamps as Date.

export type Row = Record<string, unknown>;

/** How one statement runs. */
export interface QueryOptions {
  /**
   * A name under which PostgreSQL keeps the statement parsed and planned on each pooled connection
   * (a named prepared statement), for the statements a hot path runs all the time: one name, one
   * text, always. PGlite, and PostgreSQL with DATABASE_PREPARED_STATEMENTS=off (a pooler that
   * cannot carry prepared statements), run it unnamed.
   */
  prepare?: string;
  /**
   * A statement that legitimately reads millions of rows (a compliance export over a server's raw
   * telemetry, the offline bundle's read of every server): on PostgreSQL it runs under
   * DATABASE_LONG_STATEMENT_TIMEOUT_MS instead of DATABASE_STATEMENT_TIMEOUT_MS (set for it alone
   * with SET LOCAL, inside a transaction of its own when it has none). PGlite ignores it.
   */
  longRunning?: boolean;
}

/** How a transaction's statements are bounded (PostgreSQL; PGlite ignores them). */
export interface TransactionOptions {
  /** statement_timeout for this transaction (SET LOCAL), ms; 0: none. Default: the connection's. */
  statementTimeoutMs?: number;
  /** lock_timeout for this transaction (SET LOCAL), ms; 0: none. Default: the connection's. */
  lockTimeoutMs?: number;
}

/**
 * Bounds on every PostgreSQL connection (pool, replica pool, LISTEN), sent as startup parameters
 * so the server enforces them (docs/reliability.md "A database that holds or stops answering").
 * The client additionally gives up on an answer READ_TIMEOUT_MARGIN_MS after the statement's
 * server-side bound: a server (or a proxy) that stops answering cannot hold a caller longer.
 */
export interface DatabaseTimeouts {
  /** DATABASE_STATEMENT_TIMEOUT_MS: statement_timeout. */
  statementTimeoutMs: number;
  /** DATABASE_LOCK_TIMEOUT_MS: lock_timeout (a wait for any lock: table, row, advisory). */
  lockTimeoutMs: number;
  /** DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS: idle_in_transaction_session_timeout. */
  idleInTransactionTimeoutMs: number;
  /** DATABASE_LONG_STATEMENT_TIMEOUT_MS: statement_timeout of the statements marked longRunning. */
  longStatementTimeoutMs: number;
}

export const DEFAULT_DATABASE_TIMEOUTS: DatabaseTimeouts = {
  statementTimeoutMs: 15_000,
  lockTimeoutMs: 5_000,
  idleInTransactionTimeoutMs: 10_000,
  longStatementTimeoutMs: 300_000,
};

/** How much longer than a statement's server-side timeout the client waits for its answer. */
export const READ_TIMEOUT_MARGIN_MS = 5_000;

export interface Queryable {
  /** Runs one parameterised statement and returns its rows. */
  query<T = Row>(sql: string, params?: readonly unknown[], opts?: QueryOptions): Promise<T[]>;
}

export type Liveness = { live: true } | { live: false; reason: string };

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** True for an in-memory database: nothing it holds outlives the process. */
  readonly ephemeral: boolean;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  /** Runs fn inside one transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T>;
  /**
   * True when the database answers, within `timeoutMs` (default 2000), a read of the table every
   * answer of the service needs (PostgreSQL: `servers`, so a lock held on it counts as not
   * answering); false otherwise, never later than that.
   */
  ping(timeoutMs?: number): Promise<boolean>;
  /**
   * In-process databases only (PGlite): whether the database still finishes statements, within
   * a bounded time. A wedged embedded database is a fault of this process (a restart cures it),
   * so /healthz reports it; an unreachable PostgreSQL is not (/readyz reports that).
   */
  liveness?(): Promise<Liveness>;
  close(): Promise<void>;
  /** PGlite only: the data directory as a tarball, which openPglite's `loadDataDir` starts from. */
  snapshot?(): Promise<Blob>;
  /**
   * Reads that tolerate DATABASE_READ_MAX_LAG_MS of staleness (src/db/replica.ts): a streaming
   * replica while it is within the bound, else the primary. Absent without DATABASE_READ_URL; use
   * staleReads(db) rather than this directly.
   */
  staleReads?: Queryable;
  /**
   * PostgreSQL LISTEN on `channel` over a dedicated connection (reconnected after a loss; what was
   * sent meanwhile is missed): `fn` gets each payload. Absent for PGlite, which is one process.
   */
  listen?(channel: string, fn: (payload: string) => void): Promise<{ close(): Promise<void> }>;
  /** Connection pool figures for /metrics (PostgreSQL only; PGlite has no pool). */
  poolStats?(): { total: number; idle: number; waiting: number };
}

/**
 * The connection itself is gone or cannot be trusted to answer: it must not be used again (no
 * ROLLBACK on it). Lost (08xxx, an administrator or crash shutdown 57P01-57P03, the server ending
 * an idle-in-transaction session 25P03, a socket error) or silent (pg's client-side
 * query_timeout: "Query read timeout").
 */
export function isConnectionLost(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (typeof e.code === 'string') {
    if (/^(08|57P0)/.test(e.code) || e.code === '25P03') return true;
    if (['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH'].includes(e.code)) return true;
  }
  return /Connection terminated|Query read timeout|Client has encountered a connection error/i.test(e.message ?? '');
}

/**
 * The database is unavailable right now, not "bad query": answered 503 with Retry-After
 * (src/http/problem.ts, src/http/rpc-errors.ts), never 500. A lost or silent connection
 * (isConnectionLost), no connection within the pool's wait, and the bounds every connection runs
 * under: a statement cancelled by statement_timeout (57014 query_canceled), a lock not obtained
 * within lock_timeout (55P03 lock_not_available).
 */
export function isConnectionError(err: unknown): boolean {
  if (isConnectionLost(err)) return true;
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (e.code === '57014' || e.code === '55P03') return true;
  return /connection timeout|timeout exceeded when trying to connect/i.test(e.message ?? '');
}

/**
 * True when the database refused a value the client gave: text it cannot store (NUL,
 * SQLSTATE 22021 character_not_in_repertoire; 22P05 untranslatable_character, e.g. \u0000 in
 * JSON). Validation at the edge refuses these first (domain/storable-text.ts unstorableText); this is
 * the backstop that turns one that slipped through into invalid_argument instead of a 500.
 */
export function isRefusedValueError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '22021' || code === '22P05';
}

/** A unique constraint refused the write (SQLSTATE 23505), on either backend. */
export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '23505';
}
