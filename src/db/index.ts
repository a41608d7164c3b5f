import type { Config } from '../config.js';
import type { Db } from './db.js';
import { migrate } from './migrate.js';
import { openPglite } from './pglite.js';
import { openPostgres } from './postgres.js';

export type { Db, Queryable, Row } from './db.js';
export { isConnectionError, isUniqueViolation } from './db.js';

/** Opens the configured database and brings its schema up to date. */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>, opts: { memory?: boolean } = {}): Promise<Db> {
  const db = config.databaseUrl
    ? openPostgres(config.databaseUrl)
    : await openPglite(opts.memory ? null : config.dataDir);
  try {
    await migrate(db);
  } catch (err) {
    await db.close().catch(() => {});
    throw err;
  }
  return db;
}
