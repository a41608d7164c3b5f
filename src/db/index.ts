import type { Config } from '../config.js';
import type { Db } from './db.js';
import { migrate } from './migrate.js';
import { openPglite } from './pglite.js';
import { openPostgres } from './postgres.js';
import { withReadReplica } from './replica.js';

export type { DatabaseTimeouts, Db, Queryable, QueryOptions, Row, TransactionOptions } from './db.js';
export { isConnectionError, isConnectionLost, isRefusedValueError, isUniqueViolation } from './db.js';
export { staleReads } from './replica.js';

/** Opens the configured database and brings its schema up to date. */
export async function openDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir'> &
    Partial<Pick<Config, 'databaseReadUrl' | 'databaseReadMaxLagMs' | 'databasePreparedStatements' | 'databaseTimeouts'>> & { production?: boolean },
  opts: { memory?: boolean } = {},
): Promise<Db> {
  // The transaction guard costs every promise something (src/db/transaction-guard.ts): off in production.
  const guard = config.production === undefined ? undefined : !config.production;
  const db = config.databaseUrl
    ? openPostgres(config.databaseUrl, { guard, prepared: config.databasePreparedStatements, timeouts: config.databaseTimeouts })
    : await openPglite(opts.memory ? null : config.dataDir, { guard });
  try {
    await migrate(db);
  } catch (err) {
    await db.close().catch(() => {});
    throw err;
  }
  // Reads that tolerate staleness go to the replica (docs/deployment.md "Read replicas").
  if (config.databaseUrl && config.databaseReadUrl) return withReadReplica(db, config.databaseReadUrl, {
      maxLagMs: config.databaseReadMaxLagMs ?? 2000,
      prepared: config.databasePreparedStatements,
      timeouts: config.databaseTimeouts,
    });
  return db;
}
