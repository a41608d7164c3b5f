// Database outage: PostgreSQL (an instance this script owns) stops for 10 s under load and starts
// again. During the outage requests must get 503 problem+json with Retry-After quickly, /readyz
// must say unready, and the service must recover by itself within 5 s with no acknowledged
// report lost. Usage: tsx scripts/reliability/db-outage.ts
import { check, driveReports, havePostgresBinaries, ownPostgres, startService, storedTags, waitExit } from './harness.js';

const port = 18900 + Math.floor(Math.random() * 300);
const prefix = `outage${Date.now()}`;
let stopping = false;

async function main() {
  if (!havePostgresBinaries()) {
    process.stdout.write('SKIP database outage: initdb/runuser not available\n');
    return;
  }
  const pgInst = ownPostgres(port + 1000);
  try {
    pgInst.start();
    const svc = await startService({ DATABASE_URL: pgInst.url }, port);
    // A service that dies (rather than refusing) is the failure this script exists to find: say
    // why, with its own output, instead of only the refused connection that follows.
    svc.child.once('exit', (code, signal) => {
      if (!stopping) process.stderr.write(`FAIL the service exited during the outage test (code ${code}, signal ${signal}); its output:\n${svc.logs()}\n`);
    });
    const before = driveReports(svc.base, `${prefix}-before`, 10);
    await new Promise((r) => setTimeout(r, 1500));
    await before.stop();

    pgInst.stop();
    const during = driveReports(svc.base, `${prefix}-during`, 10);
    await new Promise((r) => setTimeout(r, 1000));
    const readyDown = await fetch(`${svc.base}/readyz`);
    check(readyDown.status === 503, '/readyz reports unready while the database is down');
    await new Promise((r) => setTimeout(r, 9000));
    const outage = await during.stop();
    const non200 = outage.problems;
    check(non200.length > 0, 'requests during the outage were refused');
    check(non200.every((p) => p.status === 503), `refusals are 503 (saw ${JSON.stringify([...outage.statuses])})`);
    check(non200.every((p) => p.contentType.startsWith('application/problem+json') && p.retryAfter !== null), 'refusals are problem+json with Retry-After');
    check(outage.slowestNon200Ms < 3000, `refusals come quickly (slowest ${Math.round(outage.slowestNon200Ms)} ms)`);

    pgInst.start();
    const t0 = performance.now();
    let recovered = false;
    while (performance.now() - t0 < 5000) {
      const r = await fetch(`${svc.base}/api/report`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ server_url: 'https://reliability-0.example.com/mcp', success: true, latency_ms: 1, tool_name: `${prefix}-after-0` }),
      });
      if (r.status === 200) {
        recovered = true;
        break;
      }
      await new Promise((r2) => setTimeout(r2, 100));
    }
    check(recovered, `the service recovered within 5 s of the database returning (${Math.round(performance.now() - t0)} ms)`);
    const readyUp = await fetch(`${svc.base}/readyz`);
    check(readyUp.status === 200, '/readyz reports ready again');
    stopping = true;
    svc.child.kill('SIGTERM');
    await waitExit(svc.child);

    const pool = pgInst.client();
    const stored = await storedTags({ query: async (sql, p) => (await pool.query(sql, p)).rows }, prefix);
    await pool.end();
    const acked = [...before.result.acked, ...outage.acked];
    const missing = acked.filter((t) => !stored.has(t));
    check(missing.length === 0, `no acknowledged report lost (${acked.length} acknowledged, ${missing.length} missing)`);
  } finally {
    pgInst.destroy();
  }
}

await main();
