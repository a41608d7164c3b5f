// Crash safety: drive POST /api/report at load, SIGKILL the service mid-run, restart it, and
// prove every acknowledged report is stored. Usage: tsx scripts/reliability/crash.ts [--pglite]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPglite } from '../../src/db/pglite.js';
import { check, driveReports, havePostgresBinaries, ownPostgres, startService, storedTags, waitExit } from './harness.js';

const usePglite = process.argv.includes('--pglite');
const port = 18300 + Math.floor(Math.random() * 500);
const prefix = `crash${Date.now()}`;

async function main() {
  if (!usePglite && !havePostgresBinaries()) {
    process.stdout.write('SKIP crash safety on PostgreSQL: initdb/runuser not available\n');
    return;
  }
  const pgInst = usePglite ? null : ownPostgres(port + 1000);
  const dataDir = usePglite ? mkdtempSync(join(tmpdir(), 'obs-crash-')) : null;
  const env: Record<string, string> = pgInst ? { DATABASE_URL: pgInst.url } : { DATA_DIR: dataDir! };
  try {
    pgInst?.start();
    let svc = await startService(env, port);
    const load = driveReports(svc.base, prefix, 20);
    await new Promise((r) => setTimeout(r, 3000));
    svc.child.kill('SIGKILL');
    await waitExit(svc.child);
    const res = await load.stop();
    process.stdout.write(`acknowledged before the kill: ${res.acked.size}; statuses ${JSON.stringify([...res.statuses])}\n`);
    check(res.acked.size > 0, 'the service acknowledged reports before it was killed');

    svc = await startService(env, port);
    const ready = await fetch(`${svc.base}/readyz`);
    check(ready.status === 200, 'the restarted service is ready');
    svc.child.kill('SIGTERM');
    await waitExit(svc.child);

    let stored: Set<string>;
    if (pgInst) {
      const pool = pgInst.client();
      stored = await storedTags({ query: async (sql, p) => (await pool.query(sql, p)).rows }, prefix);
      await pool.end();
    } else {
      const db = await openPglite(dataDir!);
      stored = await storedTags(db, prefix);
      await db.close();
    }
    const missing = [...res.acked].filter((t) => !stored.has(t));
    process.stdout.write(`stored: ${stored.size}; acknowledged but missing: ${missing.length}\n`);
    check(res.acked.size <= stored.size, 'count acknowledged <= count stored');
    check(missing.length === 0, `every acknowledged report is findable (${usePglite ? 'PGlite' : 'PostgreSQL'})`);
  } finally {
    pgInst?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
