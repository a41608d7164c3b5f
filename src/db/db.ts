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
}

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
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** True when the database answers a trivial query. */
  ping(): Promise<boolean>;
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

/** Postgres error codes that mean "the database is unreachable right now", not "bad query". */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (typeof e.code === 'string') {
    if (/^(08|57P0)/.test(e.code)) return true; // connection_exception, admin/crash shutdown
    if (['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH'].includes(e.code)) return true;
  }
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    e.message ?? '',
  );
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
