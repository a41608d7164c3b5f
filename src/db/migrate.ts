import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Db } from './db.js';

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
// Arbitrary constant shared by every instance: whoever holds it applies migrations, the rest wait.
const MIGRATION_LOCK = 72_620_001;
/**
 * How long one migration statement waits for a lock on a table it changes. A migration's DDL
 * (ALTER TABLE takes ACCESS EXCLUSIVE) queued behind a running instance's long query would make
 * every later statement on that table, the running instances' writes included, queue behind it for
 * as long as that query lasts: it gives up instead, and the whole migration is retried.
 */
export const MIGRATION_LOCK_TIMEOUT_MS = 5_000;
/** Attempts of the migration transaction when its locks are not available (then start-up fails). */
export const MIGRATION_ATTEMPTS = 5;
/** Pause before the second attempt, doubling before each next one (1, 2, 4, 8 s). */
export const MIGRATION_BACKOFF_MS = 1_000;

/** Start-up refused: the migrations never got the locks they need (nothing was applied). */
export class MigrationLockError extends Error {}

export interface MigrateOptions {
  /** Default MIGRATION_LOCK_TIMEOUT_MS. */
  lockTimeoutMs?: number;
  /** Default MIGRATION_ATTEMPTS. */
  attempts?: number;
  /** Default MIGRATION_BACKOFF_MS. */
  backoffMs?: number;
}

export function listMigrations(dir = MIGRATIONS_DIR): { name: string; sql: string }[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => ({ name, sql: readFileSync(join(dir, name), 'utf8') }));
}

/**
 * Applies pending migrations in name order, each once, inside one transaction holding an
 * advisory lock, so two instances starting together neither race nor double-apply.
 * Returns the names applied by this call. When a statement cannot get a table lock within
 * `lockTimeoutMs` (55P03) the transaction is rolled back and retried after a pause, `attempts`
 * times in all; then MigrationLockError (docs/deployment.md "What the database coordinates").
 */
export async function migrate(db: Db, dir = MIGRATIONS_DIR, opts: MigrateOptions = {}): Promise<string[]> {
  const pending = listMigrations(dir);
  const lockTimeoutMs = opts.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS;
  const attempts = opts.attempts ?? MIGRATION_ATTEMPTS;
  const backoffMs = opts.backoffMs ?? MIGRATION_BACKOFF_MS;
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrateOnce(db, pending, lockTimeoutMs);
    } catch (err) {
      if ((err as { code?: unknown } | null)?.code !== '55P03') throw err;
      if (attempt >= attempts) {
        throw new MigrationLockError(
          `the database migrations could not get the table locks they need: ${attempts} attempts over ${Math.round((Date.now() - started) / 1000)} s each waited ${lockTimeoutMs} ms (SQLSTATE 55P03) and nothing was applied. Another session holds a conflicting lock (a long transaction or query of a running instance, a manual LOCK TABLE): find it in pg_locks / pg_stat_activity, end it or wait for it, and start again`,
        );
      }
      await new Promise((r) => setTimeout(r, backoffMs * 2 ** (attempt - 1)));
    }
  }
}

async function migrateOnce(db: Db, pending: { name: string; sql: string }[], lockTimeoutMs: number): Promise<string[]> {
  // No statement bound (a migration may rewrite a large table) and no bound on the wait for the
  // migration lock (instances starting together wait for the one applying them); the migration's
  // own statements wait at most lockTimeoutMs for any other lock.
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await tx.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.floor(lockTimeoutMs))}`);
    await tx.query(
      'CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())',
    );
    const done = new Set((await tx.query<{ name: string }>('SELECT name FROM schema_migrations')).map((r) => r.name));
    const applied: string[] = [];
    for (const m of pending) {
      if (done.has(m.name)) continue;
      // Each file is a plain script; statements are split on lines ending with ';' so both
      // backends run it inside this one transaction.
      for (const stmt of splitStatements(m.sql)) await tx.query(stmt);
      await tx.query('INSERT INTO schema_migrations (name) VALUES ($1)', [m.name]);
      applied.push(m.name);
    }
    return applied;
  }, { statementTimeoutMs: 0, lockTimeoutMs: 0 });
}

/** Splits a migration script into statements. `$$` bodies are kept whole. */
export function splitStatements(sql: string): string[] {
  const out: string[] = [];
  let buf = '';
  let inDollar = false;
  for (const line of sql.split('\n')) {
    if (/^\s*--/.test(line) && buf.trim() === '') continue;
    buf += line + '\n';
    const dollars = line.match(/\$\$/g)?.length ?? 0;
    if (dollars % 2 === 1) inDollar = !inDollar;
    if (!inDollar && /;\s*(--.*)?$/.test(line)) {
      out.push(buf.trim());
      buf = '';
    }
  }
  if (buf.trim() !== '') out.push(buf.trim());
  return out;
}
