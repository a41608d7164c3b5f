import pg from 'pg';
import { DEFAULT_DATABASE_TIMEOUTS, isConnectionLost, READ_TIMEOUT_MARGIN_MS, type DatabaseTimeouts, type Db, type Queryable, type QueryOptions, type Row, type TransactionOptions } from './db.js';
import { createTransactionGuard, transactionGuardDefault } from './transaction-guard.js';

// pg returns int8 and numeric as strings to protect precision; our counts and sums stay far
// below 2^53, so both backends hand numbers upward (PGlite already does).
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20 || oid === 1700) return (v: string) => (v === null ? null : Number(v));
    return pg.types.getTypeParser(oid, format);
  },
};

export interface PostgresOptions {
  max?: number;
  connectionTimeoutMillis?: number;
  /** Refuse pool statements from inside an open transaction (src/db/transaction-guard.ts); default on unless NODE_ENV=production. */
  guard?: boolean;
  /** Run statements given a `prepare` name as named prepared statements (DATABASE_PREPARED_STATEMENTS; default true). */
  prepared?: boolean;
  /** Bounds of every statement and wait (DATABASE_*_TIMEOUT_MS); each omitted one takes its default. */
  timeouts?: Partial<DatabaseTimeouts>;
}

/**
 * TCP keep-alive on every connection, first probe after this long idle: a peer that vanished
 * (host gone, connection dropped by a firewall) is noticed on idle and LISTEN connections too,
 * where no statement's read timeout runs.
 */
const KEEPALIVE_INITIAL_DELAY_MS = 10_000;
/** The LISTEN connection runs `SELECT 1` this often: a server that stops answering (a proxy keeping the socket open) is noticed and the connection replaced. */
export const LISTEN_HEARTBEAT_MS = 10_000;
/** The client's wait for the answer to a ROLLBACK (a server that answered the failed statement answers this at once). */
const ROLLBACK_READ_TIMEOUT_MS = 5_000;
/** setTimeout's largest delay: "no client-side bound" for a statement with no server-side one (migrations). */
const NO_READ_TIMEOUT = 2_147_483_647;

/** The client's wait for the answer of a statement whose server-side bound is `statementTimeoutMs` (0: none). */
function readTimeoutFor(statementTimeoutMs: number): number {
  return statementTimeoutMs === 0 ? NO_READ_TIMEOUT : statementTimeoutMs + READ_TIMEOUT_MARGIN_MS;
}

/** A timeout in ms as a SET value: a non-negative integer (they come from validated settings, never from input). */
function msSetting(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0) throw new Error(`invalid timeout: ${ms}`);
  return String(ms);
}

type Statement = pg.QueryConfig & { query_timeout?: number };

/** The statement as pg runs it: named (parsed and planned once per connection) or not; with its own client-side read timeout when given. */
function statementOf(name: string | undefined, sql: string, params: readonly unknown[] | undefined, readTimeout?: number): Statement {
  const st: Statement = name !== undefined ? { name, text: sql, values: params as unknown[] | undefined } : { text: sql, values: params as unknown[] | undefined };
  if (readTimeout !== undefined) st.query_timeout = readTimeout;
  return st;
}

/**
 * The server does not have the named statement the client prepared on this connection (26000), or
 * has another of that name (42P05): a pooler in transaction mode that hands each transaction a
 * different server connection without carrying prepared statements. Refused at Parse or Bind,
 * before anything ran.
 */
function isPreparedStatementMixup(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '26000' || code === '42P05';
}

/** The listener a checked-out client holds (see transaction()): its queries report the error. */
function ignoreConnectionError(): void {}

/**
 * A checked-out client back to the pool, which listens to it again itself (a broken one is
 * ended: pg destroys the socket of a client ended with a statement still unanswered). A module
 * function, not a closure per statement: tsx (esbuild keepNames) names every such closure with
 * Object.defineProperty when it is made (test/hot-path-names.test.ts).
 */
function releaseClient(client: pg.PoolClient, broken: boolean): void {
  client.removeListener('error', ignoreConnectionError);
  client.release(broken);
}

/**
 * After a failed statement outside a transaction: the connection is kept when the server answered
 * with an error of the statement (a DatabaseError whose session is intact), ended otherwise
 * (lost, silent, or an error pg raised itself, after which its state is unknown).
 */
function brokenBy(err: unknown): boolean {
  return !(err instanceof pg.DatabaseError) || isConnectionLost(err);
}

export function openPostgres(url: string, opts: PostgresOptions = {}): Db {
  const timeouts: DatabaseTimeouts = { ...DEFAULT_DATABASE_TIMEOUTS, ...opts.timeouts };
  const connectionTimeoutMillis = opts.connectionTimeoutMillis ?? 2000;
  // Every connection, pool and LISTEN alike, is bounded by the server (statement, lock and
  // idle-in-transaction timeouts as startup parameters), by the client (no answer within the
  // statement's bound plus a margin fails the statement and ends the connection) and by TCP
  // keep-alive. A statement that needs longer says so (QueryOptions.longRunning, TransactionOptions).
  const connection = {
    connectionString: url,
    connectionTimeoutMillis,
    statement_timeout: timeouts.statementTimeoutMs,
    lock_timeout: timeouts.lockTimeoutMs,
    idle_in_transaction_session_timeout: timeouts.idleInTransactionTimeoutMs,
    query_timeout: readTimeoutFor(timeouts.statementTimeoutMs),
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_INITIAL_DELAY_MS,
  } satisfies pg.ClientConfig;
  let poolEnded: Promise<void> | null = null;
  const pool = new pg.Pool({
    ...connection,
    max: opts.max ?? 10,
    idleTimeoutMillis: 30_000,
    types: types as pg.CustomTypesConfig,
  });
  // An idle client losing its connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  const guard = createTransactionGuard('postgres', opts.guard ?? transactionGuardDefault());
  let prepared = opts.prepared ?? true;
  // Behind a pooler that cannot carry named statements the service must not stop ingesting: the
  // first mix-up turns them off for this process, says so once, and the statement runs unnamed.
  const unprepare = (err: unknown) => {
    if (!prepared) return;
    prepared = false;
    const e = err as { code?: string; message?: string };
    process.emitWarning(
      `PostgreSQL refused a named prepared statement (${e.code}: ${e.message}), as a pooler in transaction mode that does not carry them does; statements run unnamed from now on (set DATABASE_PREPARED_STATEMENTS=off to start that way)`,
      'PreparedStatementsWarning',
    );
  };
  /** One statement on a pooled connection of its own (what pool.query does, keeping the connection after an ordinary SQL error). */
  async function onConnection<T>(st: Statement): Promise<T[]> {
    const client = await pool.connect();
    // As in transaction(): the server ending the connection must not reach the process as an unheard 'error'.
    client.on('error', ignoreConnectionError);
    try {
      const rows = (await client.query(st)).rows as T[];
      releaseClient(client, false);
      return rows;
    } catch (err) {
      releaseClient(client, brokenBy(err));
      throw err;
    }
  }
  const query = async <T = Row>(sql: string, params?: readonly unknown[], qopts?: QueryOptions): Promise<T[]> => {
    guard.check('a query');
    // A long statement gets its own bound inside a transaction of its own (SET LOCAL).
    if (qopts?.longRunning) return transaction((tx) => tx.query<T>(sql, params, { prepare: qopts.prepare }), { statementTimeoutMs: timeouts.longStatementTimeoutMs });
    const name = prepared ? qopts?.prepare : undefined;
    try {
      return await onConnection<T>(statementOf(name, sql, params));
    } catch (err) {
      if (name === undefined || !isPreparedStatementMixup(err)) throw err;
      unprepare(err);
      return onConnection<T>(statementOf(undefined, sql, params));
    }
  };
  async function transaction<T>(fn: (tx: Queryable) => Promise<T>, topts?: TransactionOptions): Promise<T> {
    guard.check('a nested transaction');
    const client = await pool.connect();
    // A checked-out client has no 'error' listener of the pool's (pg-pool takes its own off until
    // release), and pg emits 'error' when the server ends a connection: a restart, a failover or
    // pg_terminate_backend while this transaction waits between two statements, or the socket's
    // end after a statement already failed with it. Unheard, that error would end the process;
    // the statement in flight, or the next one, fails instead, and the transaction with it.
    client.on('error', ignoreConnectionError);
    // The transaction's own bounds, set with its BEGIN in one round trip; its statements' client-side read timeout follows.
    const statementMs = topts?.statementTimeoutMs ?? timeouts.statementTimeoutMs;
    const readTimeout = topts?.statementTimeoutMs === undefined ? undefined : readTimeoutFor(statementMs);
    let begin = 'BEGIN';
    if (topts?.statementTimeoutMs !== undefined) begin += `; SET LOCAL statement_timeout = ${msSetting(topts.statementTimeoutMs)}`;
    if (topts?.lockTimeoutMs !== undefined) begin += `; SET LOCAL lock_timeout = ${msSetting(topts.lockTimeoutMs)}`;
    const tx: Queryable = {
      async query<T = Row>(sql: string, params?: readonly unknown[], qopts?: QueryOptions) {
        const name = prepared ? qopts?.prepare : undefined;
        const long = qopts?.longRunning === true && timeouts.longStatementTimeoutMs > statementMs && statementMs !== 0;
        try {
          if (!long) return (await client.query(statementOf(name, sql, params, readTimeout))).rows as T[];
          await client.query({ text: `SET LOCAL statement_timeout = ${msSetting(timeouts.longStatementTimeoutMs)}`, query_timeout: readTimeout } as Statement);
          const rows = (await client.query(statementOf(name, sql, params, readTimeoutFor(timeouts.longStatementTimeoutMs)))).rows as T[];
          await client.query({ text: `SET LOCAL statement_timeout = ${msSetting(statementMs)}`, query_timeout: readTimeout } as Statement);
          return rows;
        } catch (err) {
          // The transaction is aborted with it: it fails, the next ones run unnamed.
          if (name !== undefined && isPreparedStatementMixup(err)) unprepare(err);
          throw err;
        }
      },
    };
    try {
      await client.query({ text: begin, query_timeout: readTimeout } as Statement);
      const out = await guard.run(() => fn(tx));
      await client.query({ text: 'COMMIT', query_timeout: readTimeout } as Statement);
      releaseClient(client, false);
      return out;
    } catch (err) {
      // A connection that is gone or silent cannot roll back (the server rolls back what it
      // loses); waiting for its answer would only hold the caller another read timeout.
      if (isConnectionLost(err)) {
        releaseClient(client, true);
        throw err;
      }
      try {
        await client.query({ text: 'ROLLBACK', query_timeout: ROLLBACK_READ_TIMEOUT_MS } as Statement);
        releaseClient(client, false);
      } catch {
        releaseClient(client, true);
      }
      throw err;
    }
  }
  return {
    kind: 'postgres',
    ephemeral: false,
    query,
    async exec(sql) {
      guard.check('a script');
      // A script (maintenance such as VACUUM FULL, a benchmark's set-up) may run long and may not
      // run inside a transaction, so no SET LOCAL: its session gets the long bound, and the
      // connection is ended afterwards so that setting never reaches another caller.
      const client = await pool.connect();
      client.on('error', ignoreConnectionError);
      const readTimeout = readTimeoutFor(timeouts.longStatementTimeoutMs);
      try {
        await client.query({ text: `SET statement_timeout = ${msSetting(timeouts.longStatementTimeoutMs)}`, query_timeout: readTimeout } as Statement);
        await client.query({ text: sql, query_timeout: readTimeout } as Statement);
      } finally {
        releaseClient(client, true);
      }
    },
    transaction,
    async listen(channel, fn) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`invalid channel name: ${channel}`);
      let client: pg.Client | null = null;
      let closed = false;
      let retry: NodeJS.Timeout | null = null;
      let heartbeat: NodeJS.Timeout | null = null;
      const reconnect = () => {
        if (closed || retry) return;
        const dead = client;
        client = null;
        if (heartbeat) clearInterval(heartbeat);
        heartbeat = null;
        void dead?.end().catch(() => {});
        retry = setTimeout(() => {
          retry = null;
          connect().catch(reconnect);
        }, 1000);
        retry.unref();
      };
      const connect = async () => {
        // The same bounds as the pool's connections (this one runs no transaction, but its LISTEN and heartbeat are statements).
        const c = new pg.Client(connection);
        c.on('notification', (m) => {
          if (m.channel === channel) fn(m.payload ?? '');
        });
        c.on('error', () => {
          if (client === c) reconnect();
        });
        c.on('end', () => {
          if (client === c) reconnect();
        });
        await c.connect();
        await c.query(`LISTEN ${channel}`);
        if (closed) return void (await c.end().catch(() => {}));
        client = c;
        // A server that stops answering leaves this connection open and silent: no notification
        // arrives and nothing fails. A statement every LISTEN_HEARTBEAT_MS, bounded by the read
        // timeout of every statement, notices it; the connection is then replaced.
        heartbeat = setInterval(() => {
          if (client !== c) return;
          c.query({ text: 'SELECT 1', query_timeout: Math.min(LISTEN_HEARTBEAT_MS, readTimeoutFor(timeouts.statementTimeoutMs)) } as Statement).catch(() => {
            if (client === c) reconnect();
          });
        }, LISTEN_HEARTBEAT_MS);
        heartbeat.unref();
      };
      await connect().catch(reconnect);
      return {
        async close() {
          closed = true;
          if (retry) clearTimeout(retry);
          if (heartbeat) clearInterval(heartbeat);
          const c = client;
          client = null;
          await c?.end().catch(() => {});
        },
      };
    },
    async ping(timeoutMs = 2000) {
      // Bounded twice: the statement's answer (client-side read timeout: the connection is ended
      // when it does not come) and the whole, waiting for a pooled connection included.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(resolve, timeoutMs, false);
      });
      // The table every answer reads: a lock held on it (a migration, a LOCK TABLE) is a database
      // that does not answer the service, although SELECT 1 would pass.
      const probe = onConnection({ text: 'SELECT 1 FROM servers LIMIT 1', query_timeout: timeoutMs } as Statement).then(
        () => true,
        () => false,
      );
      try {
        return await Promise.race([probe, late]);
      } finally {
        clearTimeout(timer);
      }
    },
    async close() {
      // Idempotent: two services sharing one database (tests, a gate beside the service) both close it.
      await (poolEnded ??= pool.end());
    },
    poolStats() {
      return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
    },
  };
}
