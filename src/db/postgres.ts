import pg from 'pg';
import type { Db, Queryable, QueryOptions, Row } from './db.js';
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
}

/** The statement as pg runs it: named (parsed and planned once per connection) or not. */
function statementOf(name: string | undefined, sql: string, params: readonly unknown[] | undefined): pg.QueryConfig {
  return name !== undefined ? { name, text: sql, values: params as unknown[] | undefined } : { text: sql, values: params as unknown[] | undefined };
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
 * A transaction's client back to the pool, which listens to it again itself (a broken one is
 * ended). A module function, not a closure per transaction: tsx (esbuild keepNames) names every
 * such closure with Object.defineProperty when it is made (test/hot-path-names.test.ts).
 */
function releaseClient(client: pg.PoolClient, broken: boolean): void {
  client.removeListener('error', ignoreConnectionError);
  client.release(broken);
}

export function openPostgres(url: string, opts: PostgresOptions = {}): Db {
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.max ?? 10,
    connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 2000,
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
  const query = async <T = Row>(sql: string, params?: readonly unknown[], qopts?: QueryOptions): Promise<T[]> => {
    guard.check('a query');
    const name = prepared ? qopts?.prepare : undefined;
    try {
      return (await pool.query(statementOf(name, sql, params))).rows as T[];
    } catch (err) {
      if (name === undefined || !isPreparedStatementMixup(err)) throw err;
      unprepare(err);
      return (await pool.query(statementOf(undefined, sql, params))).rows as T[];
    }
  };
  return {
    kind: 'postgres',
    ephemeral: false,
    query,
    async exec(sql) {
      guard.check('a script');
      await pool.query(sql);
    },
    async transaction(fn) {
      guard.check('a nested transaction');
      const client = await pool.connect();
      // A checked-out client has no 'error' listener of the pool's (pg-pool takes its own off until
      // release), and pg emits 'error' when the server ends a connection: a restart, a failover or
      // pg_terminate_backend while this transaction waits between two statements, or the socket's
      // end after a statement already failed with it. Unheard, that error would end the process;
      // the statement in flight, or the next one, fails instead, and the transaction with it.
      client.on('error', ignoreConnectionError);
      const tx: Queryable = {
        async query<T = Row>(sql: string, params?: readonly unknown[], qopts?: QueryOptions) {
          const name = prepared ? qopts?.prepare : undefined;
          try {
            return (await client.query(statementOf(name, sql, params))).rows as T[];
          } catch (err) {
            // The transaction is aborted with it: it fails, the next ones run unnamed.
            if (name !== undefined && isPreparedStatementMixup(err)) unprepare(err);
            throw err;
          }
        },
      };
      try {
        await client.query('BEGIN');
        const out = await guard.run(() => fn(tx));
        await client.query('COMMIT');
        releaseClient(client, false);
        return out;
      } catch (err) {
        try {
          await client.query('ROLLBACK');
          releaseClient(client, false);
        } catch {
          releaseClient(client, true);
        }
        throw err;
      }
    },
    async listen(channel, fn) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`invalid channel name: ${channel}`);
      let client: pg.Client | null = null;
      let closed = false;
      let retry: NodeJS.Timeout | null = null;
      const reconnect = () => {
        if (closed || retry) return;
        const dead = client;
        client = null;
        void dead?.end().catch(() => {});
        retry = setTimeout(() => {
          retry = null;
          connect().catch(reconnect);
        }, 1000);
        retry.unref();
      };
      const connect = async () => {
        const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 2000 });
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
      };
      await connect().catch(reconnect);
      return {
        async close() {
          closed = true;
          if (retry) clearTimeout(retry);
          const c = client;
          client = null;
          await c?.end().catch(() => {});
        },
      };
    },
    async ping() {
      try {
        await pool.query('SELECT 1');
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      await pool.end();
    },
    poolStats() {
      return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
    },
  };
}
