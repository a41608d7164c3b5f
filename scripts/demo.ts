// `npm run demo`: fills the configured database (the one `npm start` uses) with 30 days of
// realistic telemetry for 30 MCP servers (src/demo/load-demo.ts); refuses to run twice.
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/index.js';
import { DEMO_URL_LIKE, loadDemoData } from '../src/demo/load-demo.js';

function progress(done: number, total: number, reports: number) {
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${Math.round((done / total) * 100)}%  day ${done}/${total}  ${reports.toLocaleString('en')} reports`);
}

async function main() {
  const config = loadConfig();
  const db = await openDatabase(config);
  try {
    const existing = await db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM servers WHERE url LIKE $1', [DEMO_URL_LIKE]);
    if (existing[0]!.n > 0) {
      process.stderr.write('demo data is already loaded in this database; nothing to do\n');
      return;
    }
    const { servers, reports } = await loadDemoData(db, { onDay: progress });
    process.stderr.write(`\nloaded ${servers} servers and ${reports.toLocaleString('en')} reports\n`);
    process.stderr.write('try: npm start, then open localhost:8080/monitor (or curl localhost:8080/api/leaderboard)\n');
  } finally {
    await db.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`\ndemo failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
