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
    // The rollups are folded from the raw rows (issue 22): after the restart every stored report
    // is in them exactly once, whether the killed instance had folded it or not.
    const foldedSql = `SELECT (SELECT count(*) FROM telemetry)::int8::text AS raw, (SELECT coalesce(sum(n), 0) FROM server_totals)::int8::text AS totals,
                              (SELECT coalesce(sum(n), 0) FROM telemetry_hourly)::int8::text AS hourly, (SELECT coalesce(sum(reports), 0) FROM trust_evidence)::int8::text AS evidence`;
    let folded: { raw: string; totals: string; hourly: string; evidence: string };
    if (pgInst) {
      const pool = pgInst.client();
      stored = await storedTags({ query: async (sql, p) => (await pool.query(sql, p)).rows }, prefix);
      folded = (await pool.query(foldedSql)).rows[0];
      await pool.end();
    } else {
      const db = await openPglite(dataDir!);
      stored = await storedTags(db, prefix);
      folded = (await db.query<typeof folded>(foldedSql))[0]!;
      await db.close();
    }
    process.stdout.write(`raw rows ${folded.raw}; in server_totals ${folded.totals}, telemetry_hourly ${folded.hourly}, trust_evidence ${folded.evidence}\n`);
    check(folded.totals === folded.raw && folded.hourly === folded.raw && folded.evidence === folded.raw, 'every stored report is folded into each rollup exactly once');
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
