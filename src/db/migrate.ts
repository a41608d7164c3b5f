import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Db } from './db.js';

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
// Arbitrary constant shared by every instance: whoever holds it applies migrations, the rest wait.
const MIGRATION_LOCK = 72_620_001;

export function listMigrations(dir = MIGRATIONS_DIR): { name: string; sql: string }[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => ({ name, sql: readFileSync(join(dir, name), 'utf8') }));
}

/**
 * Applies pending migrations in name order, each once, inside one transaction holding an
 * advisory lock, so two instances starting together neither race nor double-apply.
 * Returns the names applied by this call.
 */
export async function migrate(db: Db, dir = MIGRATIONS_DIR): Promise<string[]> {
  const pending = listMigrations(dir);
  // Migrations run without the statement and lock bounds of the service's own statements (a
  // migration may rewrite a large table; instances starting together wait for the one applying
  // them): docs/deployment.md "What the database coordinates".
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
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
