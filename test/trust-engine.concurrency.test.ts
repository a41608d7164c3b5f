// Concurrent score computations of one server on a real database: an identical write skipped by
// one computation (SCORE_RESAVE_MS) must not let it read the ranked list before the other
// computation's row committed. On PostgreSQL the two run on different connections; this caught a
// /monitor leaderboard missing a server that /api/leaderboard listed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTrustEngine } from '../src/services/trust-engine.js';
import { serverStore } from '../src/store/servers.js';
import { telemetryStore } from '../src/store/telemetry.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

const NOW = new Date('2026-06-15T12:00:00Z');
let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

describe(`trust engine under concurrent reads (${backend})`, () => {
  it('lists a newly rated server in every ranked list computed concurrently', async () => {
    for (let round = 0; round < 5; round++) {
      const engine = createTrustEngine(tdb.db);
      const server = await serverStore(tdb.db).ensure({ url: `https://race-${round}.example/mcp`, name: `race-${round}`, slug: `race-${round}`, category: 'search' }, NOW);
      await telemetryStore(tdb.db).insertMany([{ serverId: server.id, at: NOW, source: 'test', report: { server_url: server.url, success: true, latency_ms: 10, tool_name: null, http_status: 200 } }]);
      const lists = await Promise.all([engine.ranked(null, NOW), engine.ranked('search', NOW), engine.ranked(null, NOW), engine.scoreFor(server, NOW).then(() => engine.ranked('search', NOW))]);
      for (const list of lists) {
        const row = list.find((r) => r.id === server.id);
        expect(row?.trust_score, `round ${round}`).not.toBeNull();
        expect(row?.verdict).not.toBe('UNRATED');
      }
    }
  });
});
