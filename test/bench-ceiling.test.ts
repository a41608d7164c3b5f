import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

// `npm run bench`'s committed-write ceiling (scripts/bench-ceiling.ts, POST /committed/report):
// the bare POST plus the service's own group-committed raw append. The bench holds the report
// row against it, so it must really store the row before it answers, and do nothing else.
describe.skipIf(backend !== 'postgres')('bench ceiling: bare POST + committed append (PostgreSQL)', () => {
  let tdb: TestDatabase;
  let child: ChildProcess;
  let base: string;
  let serverId: number;
  const url = 'https://ceiling-1.example.com/mcp';

  beforeAll(async () => {
    tdb = await createTestDatabase();
    serverId = Number((await tdb.db.query("INSERT INTO servers (url, name, slug, category) VALUES ($1, 'ceiling-1', 'ceiling-1', 'general') RETURNING id", [url]))[0]!.id);
    child = spawn(process.execPath, ['--import', 'tsx', 'scripts/bench-ceiling.ts'], {
      env: { ...process.env, PORT: '0', CEILING_DATABASE_URL: tdb.url! },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout!.setEncoding('utf8');
    while (!/ready http=\d+/.test(out)) {
      const [chunk] = (await once(child.stdout!, 'data')) as [string];
      out += chunk;
    }
    base = `http://127.0.0.1:${/ready http=(\d+)/.exec(out)![1]}`;
  }, 60_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
    await tdb?.drop();
  });

  const post = (path: string, body: unknown) => fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const stored = async () => Number((await tdb.db.query(`SELECT count(*)::int AS n FROM telemetry WHERE server_id = $1 AND source = 'bench-ceiling'`, [serverId]))[0]!.n);

  it('answers a report only once its raw row is committed', async () => {
    const before = await stored();
    const answers = await Promise.all([1, 2, 3, 4, 5].map((i) => post('/committed/report', { server_url: url, success: i % 2 === 0, latency_ms: 40 + i, tool_name: 'search' })));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(await answers[0]!.json()).toEqual({ recorded: true, server_url: url });
    // Read on another connection as soon as the answers are in: nothing waits to be written.
    expect(await stored()).toBe(before + 5);
  });

  it('refuses what the bare POST refuses (the schema), and a server the database does not have', async () => {
    const before = await stored();
    expect((await post('/committed/report', { server_url: url, success: 'yes', latency_ms: 40 })).status).toBe(400);
    expect((await post('/committed/report', { server_url: 'https://unknown.example.com/mcp', success: true, latency_ms: 40 })).status).toBe(404);
    expect(await stored()).toBe(before);
  });
});
