import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { SendMessageRequest, TaskState, type Task } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { within } from './support/within.js';

// /a2a audited as an attacker would use it (docs/agents.md "A2A"). Each finding here failed before
// its fix; what was checked and found sound is listed in docs/agents.md.

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

let app: TestApp;
const lines: { level: number; msg: string }[] = [];

beforeAll(async () => {
  const port = await freePort();
  const logStream = { write: (l: string) => void lines.push(...l.split('\n').filter((x) => x.trim()).map((x) => JSON.parse(x))) };
  app = await startTestApp({ PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'warn' }, { logStream });
}, 120_000);
afterAll(async () => app?.close());

const V1 = { 'A2A-Version': '1.0' };
const rpc1 = (method: string, params: unknown) => json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 1, method, params }, V1));
const token = (position: unknown) => Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');

describe(`ListTasks with hostile page tokens and timestamps (${backend})`, () => {
  it('a token or statusTimestampAfter naming a time the database cannot hold is -32602, not an internal error logged per call', async () => {
    const client = await new ClientFactory().createFromUrl(app.base);
    const task = (await client.sendMessage(SendMessageRequest.fromJSON({ message: { role: 'ROLE_USER', messageId: crypto.randomUUID(), parts: [{ text: 'trust score for' }] } }))) as Task;
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const from = lines.length;
    // Each decodes to a real JavaScript date that round-trips through toISOString, as ours do;
    // PostgreSQL's timestamptz holds none of them.
    const tokens = ['-271821-04-20T00:00:00.000Z', '+275760-09-13T00:00:00.000Z', '0000-01-01T00:00:00.000Z', '-000001-01-01T00:00:00.000Z', '+010000-01-01T00:00:00.000Z'];
    for (const at of tokens) {
      const r = await rpc1('ListTasks', { contextId: task.contextId, pageToken: token([at, 'x']) });
      expect(r.error, at).toMatchObject({ code: -32602, message: expect.stringMatching(/pageToken/) });
    }
    // RFC 3339 allows year 0000, and an offset can carry 0001-01-01 into year 0 UTC.
    for (const at of ['0000-01-01T00:00:00Z', '0001-01-01T00:00:00+14:00']) {
      const r = await rpc1('ListTasks', { contextId: task.contextId, statusTimestampAfter: at });
      expect(r.error, at).toMatchObject({ code: -32602, message: expect.stringMatching(/statusTimestampAfter/) });
    }
    // Fields naming no real time: Date would roll them over (30 February read as 1 March).
    for (const at of ['2020-02-30T00:00:00Z', '2021-02-29T12:00:00Z', '2020-04-31T00:00:00Z', '2020-01-01T24:00:00Z', '2020-01-01T00:60:00Z', '2020-13-01T00:00:00Z']) {
      const r = await rpc1('ListTasks', { contextId: task.contextId, statusTimestampAfter: at });
      expect(r.error, at).toMatchObject({ code: -32602, message: expect.stringMatching(/statusTimestampAfter/) });
    }
    // A leap day and an offset are real times.
    for (const at of ['2024-02-29T23:00:00-05:00', '2020-12-31T23:59:59.999+00:00']) {
      expect((await rpc1('ListTasks', { contextId: task.contextId, statusTimestampAfter: at })).result, at).toBeDefined();
    }
    // The SDK client gets the same refusal.
    const list = { tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 10, pageToken: token(['0000-01-01T00:00:00.000Z', 'x']), historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false };
    await expect(client.listTasks(list)).rejects.toMatchObject({ envelopeCode: -32602 });
    expect(lines.slice(from).filter((l) => l.level >= 50)).toEqual([]);
    // The edges that PostgreSQL does hold still answer.
    for (const at of ['0001-01-01T00:00:00Z', '9999-12-31T23:59:59Z']) {
      expect((await rpc1('ListTasks', { contextId: task.contextId, statusTimestampAfter: at })).result, at).toBeDefined();
    }
    expect((await rpc1('ListTasks', { contextId: task.contextId, pageToken: token(['9999-12-31T23:59:59.999Z', 'x']) })).result.tasks.map((t: { id: string }) => t.id)).toEqual([task.id]);
  });
});

/**
 * Reads each text `times` times with the A2A skill's text reader (src/domain/agent-request.ts) in
 * a child process, and settles once the reading is done, or rejects as HUNG after `ms` from the
 * moment the reader is loaded (the child is then killed: a slow reader fails, not a stuck run).
 */
async function readInChild(texts: string[], times: number, ms: number, what: string): Promise<void> {
  const code = `
    const { understandRequest, understandFollowUp } = await import(${JSON.stringify(new URL('../src/domain/agent-request.ts', import.meta.url).href)});
    const texts = JSON.parse(process.argv[1]);
    process.stdout.write('ready\\n');
    for (let i = 0; i < ${times}; i++) for (const t of texts) { understandRequest(t); understandFollowUp(t, 'check_trust'); }
    process.stdout.write('done\\n');`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, JSON.stringify(texts)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const said = (word: string) =>
    new Promise<void>((resolve, reject) => {
      const look = () => (out.includes(`${word}\n`) ? resolve() : undefined);
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        look();
      });
      child.once('exit', (c) => (out.includes(`${word}\n`) ? resolve() : reject(new Error(`the reader exited (${String(c)}) before '${word}'`))));
      look();
    });
  try {
    await within(said('ready'), 120_000, 'loading the reader');
    await within(said('done'), ms, what);
  } finally {
    child.kill('SIGKILL');
  }
}

describe('the skill text reader on hostile messages (at most 4,096 characters, as /a2a takes them)', () => {
  // What one client network may send in a minute is 300 skill invocations; each read below is one
  // message of a batch. Read linearly, a 4 KB text takes well under a millisecond; before, these
  // took 7 ms to 200 ms each (regular expressions tried from every position of a run of
  // punctuation, a bracket count redone for every closing bracket, "…" tripled by NFKC), so a batch
  // of 50 held the event loop for seconds and one network could keep a core busy.
  const cap = (t: string) => t.slice(0, 4096);

  it('2,000 closing brackets after 2,000 opening ones: 300 reads', async () => {
    await readInChild([cap('trust score for x' + '('.repeat(2000) + ')'.repeat(2000))], 300, 10_000, '300 reads of a text of nested brackets');
  }, 180_000);

  it('4,000 ellipses (12,000 dots after NFKC) between "can I trust" and a last word: 300 reads', async () => {
    await readInChild([cap('can i trust ' + '\u2026'.repeat(4000) + ' x')], 300, 10_000, '300 reads of a text of ellipses');
  }, 180_000);

  it('runs of fillers, punctuation, opening brackets, labels and placeholders: 300 reads of each', async () => {
    const texts = [
      'trust score for  ' + 'now '.repeat(1100),
      'trust score for x' + ' ty'.repeat(1360) + '!x',
      'trust score for x' + '!'.repeat(4000) + 'x',
      'trust score for ' + '['.repeat(4000),
      'trust score for ' + '[a]('.repeat(1000),
      'trust score for ' + 'a-'.repeat(2000) + '.b',
      'preflight ' + '<server> '.repeat(450) + 'x',
      'preflight ' + '\ufdfa'.repeat(4080),
    ].map(cap);
    await readInChild(texts, 300, 8_000, '300 reads of each hostile text');
  }, 180_000);
});
