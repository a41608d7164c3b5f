// `observatory demo` (and `npm run demo`): fills the configured database with 30 days of
// realistic telemetry for 30 MCP servers (src/demo/load-demo.ts); refuses to run twice.
import { DEMO_URL_LIKE, loadDemoData } from '../demo/load-demo.js';
import { configOf, EXIT, withDatabase, type Command } from './command.js';

export const demoCommand: Command = {
  name: 'demo',
  usage: 'demo',
  summary: 'Load the demo data set (30 servers, 30 days of telemetry) into the configured database; does nothing when it is already loaded',
  async run({ io }) {
    return withDatabase(configOf(io), async (db) => {
      const existing = await db.query<{ n: number }>('SELECT count(*)::int8 AS n FROM servers WHERE url LIKE $1', [DEMO_URL_LIKE]);
      if (existing[0]!.n > 0) {
        io.err('demo data is already loaded in this database; nothing to do');
        return EXIT.ok;
      }
      const { servers, reports } = await loadDemoData(db, { onDay: io.progress });
      io.err(`loaded ${servers} servers and ${reports.toLocaleString('en')} reports`);
      io.err('try: npm start, then open localhost:8080/monitor (or curl localhost:8080/api/leaderboard)');
      return EXIT.ok;
    });
  },
};
