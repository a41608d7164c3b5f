import type { Db, Queryable } from '../../src/db/index.js';

// Counted, not timed: the statements a service sends through its database handle, for tests that
// hold a path to a number of statements. Statements that run on their own timers (the rollup
// aggregator, the evidence bus, periodic jobs) and transaction control are not counted.

/** Statements that are not on a request's path (pg_notify: the evidence bus folds in rounds, so one can land in any request). */
export const BACKGROUND_SQL = /pg_advisory|pg_try_advisory|rollup_watermark|pg_snapshot|FROM telemetry\b|job_runs|preflight_demand|pg_notify|BEGIN|COMMIT|ROLLBACK/;

export interface StatementCounter<Q extends Queryable = Queryable> {
  /** The handle to give the service (its transactions are counted too). */
  db: Q;
  /** Runs `fn` and answers the statements sent meanwhile (each cut to 100 characters). */
  during(fn: () => Promise<unknown>): Promise<string[]>;
}

export function countingDb<Q extends Queryable>(q: Q): StatementCounter<Q> {
  let traces: string[] | null = null;
  function wrap<T extends Queryable>(target: T): T {
    return new Proxy(target, {
      get(t, prop, recv) {
        if (prop === 'query') {
          return (sql: string, params?: readonly unknown[]) => {
            if (!BACKGROUND_SQL.test(sql)) traces?.push(sql.replace(/\s+/g, ' ').slice(0, 100));
            return t.query(sql, params);
          };
        }
        if (prop === 'transaction') return (fn: (tx: Queryable) => Promise<unknown>) => (t as unknown as Db).transaction((tx) => fn(wrap(tx)));
        // The test drops the database itself (after the service closed).
        if (prop === 'close') return async () => {};
        const v = Reflect.get(t, prop, recv);
        return typeof v === 'function' ? v.bind(t) : v;
      },
    });
  }
  return {
    db: wrap(q),
    async during(fn) {
      traces = [];
      try {
        await fn();
        return traces;
      } finally {
        traces = null;
      }
    },
  };
}
