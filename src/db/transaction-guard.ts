import { AsyncLocalStorage } from 'node:async_hooks';

// The rule every transaction follows: inside `db.transaction(fn)`, `fn` talks to the database
// only through its `tx` handle. A statement sent through the outer `db` from inside `fn` (directly
// or through anything `fn` awaits that was started in its call chain) needs a second connection
// while the transaction holds one. PGlite has exactly one: that statement waits for the
// transaction, the transaction waits for the statement, and the database is frozen for good
// (issue 17 finding 1). On PostgreSQL it takes a second pool connection per open transaction,
// which under load empties the pool the same way.
//
// The guard makes that mistake an immediate, named error instead of a hang. It tracks, per
// database handle, the call chains that run inside one of its open transactions
// (AsyncLocalStorage) and refuses outer statements from them. AsyncLocalStorage costs every
// promise of the process something on Node 20 (measured: up to 2x on a promise-only loop), so it
// is on wherever the code is exercised (tests, development) and off by default with
// NODE_ENV=production, where the PGlite stall watchdog and /healthz's bounded ping stand guard
// instead (docs/reliability.md "Self-deadlock of the embedded database").

export class OuterHandleInTransactionError extends Error {
  override name = 'OuterHandleInTransactionError';
}

/** On unless NODE_ENV=production (see above). */
export function transactionGuardDefault(): boolean {
  return process.env.NODE_ENV !== 'production';
}

interface Scope {
  open: boolean;
}

export interface TransactionGuard {
  /** Throws OuterHandleInTransactionError when called from inside an open transaction of this handle. */
  check(op: string): void;
  /** Runs a transaction body so that `check` recognises its call chain; the mark ends with the transaction. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** Whether the guard is active (see transactionGuardDefault). */
  readonly enabled: boolean;
}

export function createTransactionGuard(backend: 'pglite' | 'postgres', enabled: boolean): TransactionGuard {
  const als = enabled ? new AsyncLocalStorage<Scope>() : null;
  const why =
    backend === 'pglite'
      ? 'the embedded database (PGlite) has one connection, which the transaction holds, so this statement would wait for the transaction and the transaction for it, for ever'
      : 'it needs a second pool connection while the transaction holds one, and under load that empties the pool';
  return {
    enabled,
    check(op) {
      const scope = als?.getStore();
      if (scope?.open) {
        throw new OuterHandleInTransactionError(
          `${op} through the outer database handle from inside an open transaction: ${why}. Use the transaction's handle (tx) for every statement inside db.transaction, and read anything else before opening it`,
        );
      }
    },
    async run(fn) {
      if (!als) return fn();
      // A mutable mark, cleared when the transaction ends: work started inside the transaction
      // that outlives it (a fire-and-forget cache refresh) may use the outer handle afterwards.
      const scope: Scope = { open: true };
      try {
        return await als.run(scope, fn);
      } finally {
        scope.open = false;
      }
    },
  };
}
