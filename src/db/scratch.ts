import pg from 'pg';
import { randomBytes } from 'node:crypto';

/** A throwaway PostgreSQL database: created empty on the server of `baseUrl`, dropped by `drop`. */
export interface ScratchDatabase {
  /** Connection string of the new database (same server and credentials as `baseUrl`). */
  url: string;
  /** Drops the database, closing any connection still open to it. */
  drop(): Promise<void>;
}

/**
 * Creates an empty database named `<prefix>_<random>` next to the one `baseUrl` names. Used by
 * the tests (one database per test file) and the benchmarks; nothing else creates databases.
 */
export async function createScratchDatabase(baseUrl: string, prefix: string): Promise<ScratchDatabase> {
  if (!/^[a-z_][a-z0-9_]*$/.test(prefix)) throw new Error(`scratch database prefix must be a plain identifier, got "${prefix}"`);
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await adminQuery(baseUrl, `CREATE DATABASE ${name}`);
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    drop: () => adminQuery(baseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

async function adminQuery(baseUrl: string, sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: baseUrl });
  // The server ending this connection fails the statement; unheard, pg's 'error' would end the process.
  admin.on('error', () => {});
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}
