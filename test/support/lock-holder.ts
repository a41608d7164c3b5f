// Another PostgreSQL connection holding a lock in an open transaction: a paused peer, a migration
// or an operator's `LOCK TABLE`, for the tests of what the service does while its statements wait
// (PostgreSQL only). `release()` commits and disconnects; it is idempotent, and the lock is
// released after 60 s whatever the test does, so a failing test cannot hold the database.
import pg from 'pg';

export interface LockHolder {
  /** Opens the connection, begins a transaction and runs `statement` (a LOCK, an advisory lock...). */
  hold(databaseUrl: string, statement: string): Promise<void>;
  release(): Promise<void>;
}

export function lockHolder(): LockHolder {
  let holder: pg.Client | null = null;
  let safety: NodeJS.Timeout | undefined;
  const release = async () => {
    clearTimeout(safety);
    const h = holder;
    holder = null;
    await h?.query('COMMIT').catch(() => {});
    await h?.end().catch(() => {});
  };
  return {
    async hold(databaseUrl, statement) {
      await release();
      const h = new pg.Client({ connectionString: databaseUrl });
      holder = h;
      h.on('error', () => {});
      await h.connect();
      await h.query('BEGIN');
      await h.query(statement);
      safety = setTimeout(() => void release(), 60_000);
    },
    release,
  };
}
