import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Privacy (issue 11 item 4, DECISIONS.md "Telemetry privacy"): extra telemetry fields and the
// client address never reach the database or the logs. Every table and column is dumped as text
// and every log line (LOG_LEVEL=debug, so one line per request) is searched for the values.

const IP = '198.51.100.173';
const SECRETS = {
  prompt: 'PROMPT-zq81x tell me the launch codes',
  argument: 'ARG-7731-ssn-078-05-1120',
  userId: 'USER-4412-alice@example.org',
  sessionId: 'SESSION-99x1',
};
const NEEDLES = [IP, ...Object.values(SECRETS), Buffer.from(IP).toString('hex'), Buffer.from(IP).toString('base64')];
const SERVER = 'https://privacy.example.com/mcp';

let t: TestApp;
const logs: string[] = [];
const from = { 'x-forwarded-for': IP };

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', LOG_LEVEL: 'debug' }, { logStream: { write: (line: string) => void logs.push(line) } });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

describe(`privacy (${backend})`, () => {
  it('stores and logs none of the extra telemetry fields nor the client address', async () => {
    const extras = {
      prompt: SECRETS.prompt,
      arguments: { ssn: SECRETS.argument, nested: [SECRETS.argument] },
      user_id: SECRETS.userId,
      session_id: SECRETS.sessionId,
      metadata: { user: SECRETS.userId },
    };
    // Telemetry with extra fields, over REST (single and rejected) and Connect.
    for (let i = 0; i < 3; i++) {
      const r = await postJson(`${t.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 40 + i, tool_name: 'search', ...extras }, from);
      expect(r.status).toBe(200);
    }
    const bad = await postJson(`${t.base}/api/report`, { server_url: SERVER, success: 'yes', latency_ms: -1, ...extras }, from);
    expect(bad.status).toBe(400);
    expect(await bad.text()).not.toContain(SECRETS.prompt);
    const connect = await postJson(`${t.base}/observatory.v1.TelemetryService/Report`, { serverUrl: SERVER, success: true, latencyMs: 50, toolName: 'search' }, from);
    expect(connect.status).toBe(200);

    // An API key registered from the address, pre-flights by address and by key, an MCP call.
    const reg = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key', agent_id: SECRETS.userId }, from);
    expect(reg.status).toBe(200);
    const key = (await json(reg)).api_key as string;
    expect((await fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(SERVER)}`, { headers: from })).status).toBe(200);
    const viaKey = await fetch(`${t.base}/agent-query/privacy-example-com-mcp`, { headers: { ...from, authorization: `Bearer ${key}` } });
    expect(viaKey.status).toBe(200);
    await viaKey.arrayBuffer();
    const mcp = await postJson(
      `${t.base}/mcp`,
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'preflight_check', arguments: { target: SERVER }, _meta: { user: SECRETS.userId } } },
      { ...from, accept: 'application/json, text/event-stream' },
    );
    expect(mcp.status).toBe(200);
    await mcp.arrayBuffer();

    // The whole database, every table and every column, as text.
    const tables = await t.obs.db.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name",
    );
    expect(tables.length).toBeGreaterThan(5);
    let dump = '';
    for (const { table_name } of tables) {
      const rows = await t.obs.db.query<{ row: string }>(`SELECT x::text AS row FROM "${table_name}" x`);
      dump += `${table_name}\n${rows.map((r) => r.row).join('\n')}\n`;
    }
    expect(dump).toContain('privacy.example.com'); // the dump really holds the data
    const metrics = await (await fetch(`${t.base}/metrics`)).text();

    const logText = logs.join('');
    expect(logs.length).toBeGreaterThan(5); // request logging was on
    expect(logText).toContain('/api/report');
    // Request lines come from each request's own logger (made when it first logs): they carry its id.
    const reqLines = logs.map((l) => JSON.parse(l) as { reqId?: string; req?: { url?: string } }).filter((l) => l.req?.url === '/api/report');
    expect(reqLines.length).toBeGreaterThan(0);
    for (const l of reqLines) expect(l.reqId).toMatch(/^[0-9a-f-]{36}$/);
    for (const needle of NEEDLES) {
      expect(dump.includes(needle), `database contains ${needle}`).toBe(false);
      expect(logText.includes(needle), `logs contain ${needle}`).toBe(false);
      expect(metrics.includes(needle), `metrics contain ${needle}`).toBe(false);
    }
  });
});
