import { createServer } from 'node:net';
import { SendMessageRequest, TaskState, type Task } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { ClientFactory as V03ClientFactory } from '@a2a-js/sdk-v03/client';
import type { Task as V03Task } from '@a2a-js/sdk-v03';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db, Queryable } from '../src/db/index.js';
import { openPostgres } from '../src/db/postgres.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { lockHolder } from './support/lock-holder.js';

// A2A when the database cannot serve a call (docs/agents.md "Errors"): the skills answered
// JSON-RPC -32603 "Internal error" and logged an error line per call, and a streamed task whose
// skill failed stayed `working` for as long as it was kept. Now /a2a answers as REST and the MCP
// tools do: "the database is unavailable; retry shortly", the problem type `unavailable` and the
// seconds to wait in the error's data (a google.rpc.ErrorInfo and RetryInfo in 1.0), HTTP 503 with
// Retry-After when that error is the whole answer, one warning a second instead of an error per
// call; and a task stored before the failure ends `failed` with that message.
//
// The database is made unavailable at its boundary, as pg raises it (statement_timeout, SQLSTATE
// 57014, which src/db counts as unavailable): every statement, or only some (a lock held on the
// trust tables while the task table answers), while a test says so.

const SERVER = 'https://outage.example.com/mcp';
/** A server named for the first time: no cached figure answers for it, the skill reads the database. */
const fresh = () => `https://outage-${crypto.randomUUID()}.example.com/mcp`;
const MESSAGE = 'the database is unavailable; retry shortly';
const PROBLEM_TYPE = 'https://trust-observatory.dev/problems/unavailable';

type Outage = (sql: string) => boolean;
let outage: Outage | null = null;

function statementTimeout(): Error {
  return Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
}

/** The database as the service sees it, failing the statements `outage` picks while it is set. */
function failingWhenTold(db: Db): Db {
  const run = (q: Queryable, sql: string, params?: readonly unknown[], opts?: unknown) =>
    outage?.(sql) ? Promise.reject(statementTimeout()) : q.query(sql, params, opts as never);
  const wrap = (q: Queryable): Queryable => ({ query: (sql, params, opts) => run(q, sql, params, opts) as never });
  return new Proxy(db, {
    get(target, key) {
      if (key === 'query') return (sql: string, params?: readonly unknown[], opts?: unknown) => run(target, sql, params, opts);
      if (key === 'transaction') return (fn: (tx: Queryable) => Promise<unknown>, opts?: unknown) => target.transaction((tx) => fn(wrap(tx)), opts as never);
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

const everything: Outage = () => true;
/** A lock held on the trust tables: what a skill reads fails, the task table answers. */
const trustTables: Outage = (sql) => !/a2a_tasks/.test(sql);
/** The database goes away once the streamed task is stored: everything but that first insert. */
const afterTheTaskIsStored: Outage = (sql) => !/^\s*INSERT INTO a2a_tasks/i.test(sql);

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
let tdb: TestDatabase;
let skewMs = 0;
const lines: { level: number; msg: string; unlogged_since_last?: number }[] = [];

beforeAll(async () => {
  const port = await freePort();
  tdb = await createTestDatabase();
  const logStream = { write: (l: string) => void lines.push(...l.split('\n').filter((x) => x.trim()).map((x) => JSON.parse(x))) };
  app = await startTestApp(
    { PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'warn' },
    { tdb: { ...tdb, db: failingWhenTold(tdb.db) }, logStream, now: () => new Date(Date.now() + skewMs) },
  );
  for (let i = 0; i < 3; i++) await postJson(`${app.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 40, tool_name: 'get' });
}, 120_000);
afterAll(async () => {
  outage = null;
  await app?.close();
  await tdb?.drop();
});

/** Runs `fn` with the database failing as `o` says; the log lines written meanwhile. */
async function during<T>(o: Outage, fn: () => Promise<T>): Promise<{ value: T; logged: typeof lines; seconds: number }> {
  const from = lines.length;
  const started = Date.now();
  outage = o;
  try {
    const value = await fn();
    return { value, logged: lines.slice(from), seconds: (Date.now() - started) / 1000 };
  } finally {
    outage = null;
  }
}

const v1Message = (text: string) => SendMessageRequest.fromJSON({ message: { role: 'ROLE_USER', messageId: crypto.randomUUID(), parts: [{ text }] } });
const v03Message = (text: string) => ({ message: { kind: 'message' as const, role: 'user' as const, messageId: crypto.randomUUID(), parts: [{ kind: 'text' as const, text }] } });

/** The JSON-RPC error an SDK client raised (both lines keep the response envelope). */
function envelopeOf(err: unknown): { code: number; message: string; data?: unknown } {
  // The 1.x client raises an SSE event's error as an Error whose cause is the JSON-RPC error.
  if (err instanceof Error && /^SSE event contained an error/.test(err.message) && err.cause) return envelopeOf(err.cause);
  const e = err as { errorResponse?: { error: { code: number; message: string; data?: unknown } }; envelopeCode?: number; message: string; data?: unknown };
  if (e.errorResponse) return e.errorResponse.error;
  if (e.envelopeCode !== undefined) return { code: e.envelopeCode, message: e.message, data: e.data };
  throw err;
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => {
      throw new Error(`expected a refusal, got ${JSON.stringify(v)}`);
    },
    (e: unknown) => e,
  );
}

const ERROR_INFO = 'type.googleapis.com/google.rpc.ErrorInfo';
const RETRY_INFO = 'type.googleapis.com/google.rpc.RetryInfo';

/** The 1.0 error of an unavailable database: -32603, the message, ErrorInfo and RetryInfo details. */
function expectV1Unavailable(error: { code: number; message: string; data?: unknown }) {
  expect(error.code).toBe(-32603);
  expect(error.message).toBe(MESSAGE);
  const data = error.data as Record<string, unknown>[];
  expect(Array.isArray(data)).toBe(true);
  expect(data.find((d) => d['@type'] === ERROR_INFO)).toMatchObject({ reason: 'UNAVAILABLE', metadata: { type: PROBLEM_TYPE, code: 'unavailable', status: '503', retry_after_seconds: '2' } });
  expect(data.find((d) => d['@type'] === RETRY_INFO)).toEqual({ '@type': RETRY_INFO, retryDelay: '2s' });
}

/** The 0.3 error: -32603, the message, data {type, code, status, retry_after_seconds}. */
function expectV03Unavailable(error: { code: number; message: string; data?: unknown }) {
  expect(error).toEqual({ code: -32603, message: MESSAGE, data: { type: PROBLEM_TYPE, code: 'unavailable', status: 503, retry_after_seconds: 2 } });
}

/**
 * Logged: no error line, and the outage as at most one warning a second (the first outage of the
 * file logs one at once; a later one may fall in the second after an earlier warning).
 */
function expectThrottledWarnings(logged: typeof lines, seconds: number, calls: number, first = false) {
  expect(logged.filter((l) => l.level >= 50)).toEqual([]);
  const warnings = logged.filter((l) => l.msg === 'database unavailable: answered 503');
  if (first) expect(warnings.length).toBeGreaterThanOrEqual(1);
  expect(warnings.length).toBeLessThanOrEqual(Math.floor(seconds) + 1);
  expect(warnings.length).toBeLessThan(calls);
}

describe(`/a2a while the database is unavailable (${backend})`, () => {
  it('the 1.x SDK client: SendMessage, GetTask, ListTasks and SendStreamingMessage are refused as unavailable, logged as one warning a second', async () => {
    const client = await new ClientFactory().createFromUrl(app.base);
    expect(client.protocolVersion).toBe('1.0');
    const before = (await client.sendMessage(v1Message(`trust score for ${SERVER}`))) as Task;
    expect(before.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const calls = 20;
    const { logged, seconds } = await during(everything, async () => {
      for (let i = 0; i < calls / 4; i++) {
        // The skill's read fails (a server no cache knows), or the task's insert does (a cached figure).
        expectV1Unavailable(envelopeOf(await rejection(client.sendMessage(v1Message(`trust score for ${i % 2 ? SERVER : fresh()}`)))));
        expectV1Unavailable(envelopeOf(await rejection(client.getTask({ tenant: '', id: before.id, historyLength: undefined }))));
        const list = { tenant: '', contextId: before.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 10, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false };
        expectV1Unavailable(envelopeOf(await rejection(client.listTasks(list))));
        expectV1Unavailable(envelopeOf(await rejection(client.sendMessageStream(v1Message(`preflight ${SERVER}`)).next())));
      }
    });
    expectThrottledWarnings(logged, seconds, calls, true);
    // Served again once the database answers.
    expect((await client.getTask({ tenant: '', id: before.id, historyLength: undefined })).status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it('the 0.3 SDK client: message/send, tasks/get and message/stream are refused as unavailable', async () => {
    const client = await new V03ClientFactory().createFromUrl(app.base);
    const before = (await client.sendMessage(v03Message(`trust score for ${SERVER}`))) as V03Task;
    expect(before.status.state).toBe('completed');
    const calls = 12;
    const { logged, seconds } = await during(everything, async () => {
      for (let i = 0; i < calls / 3; i++) {
        expectV03Unavailable(envelopeOf(await rejection(client.sendMessage(v03Message(`preflight ${i % 2 ? SERVER : fresh()}`)))));
        expectV03Unavailable(envelopeOf(await rejection(client.getTask({ id: before.id }))));
        // The 0.3 client folds a refused stream's JSON-RPC error into its message.
        const stream = (await rejection(client.sendMessageStream(v03Message(`preflight ${SERVER}`)).next())) as Error;
        expect(stream.message).toContain(`RPC Error: ${MESSAGE} (Code: -32603)`);
      }
    });
    expectThrottledWarnings(logged, seconds, calls);
  });

  it('on the wire: 503 with Retry-After when the refusal is the whole answer; in a batch 200, Retry-After, the others answered', async () => {
    const send = (id: number) => ({ jsonrpc: '2.0', id, method: 'message/send', params: v03Message(`trust score for ${fresh()}`) });
    const { value } = await during(trustTables, async () => {
      const one = await postJson(`${app.base}/a2a`, send(1));
      const batch = await postJson(`${app.base}/a2a`, [send(1), { jsonrpc: '2.0', id: 2, method: 'tasks/get', params: { id: 'no-such-task' } }]);
      return { one: { status: one.status, retryAfter: one.headers.get('retry-after'), body: await json(one) }, batch: { status: batch.status, retryAfter: batch.headers.get('retry-after'), body: await json(batch) } };
    });
    expect(value.one.status).toBe(503);
    expect(value.one.retryAfter).toBe('2');
    expect(value.one.body.id).toBe(1);
    expectV03Unavailable(value.one.body.error);
    expect(value.batch.status).toBe(200);
    expect(value.batch.retryAfter).toBe('2');
    expectV03Unavailable(value.batch.body[0].error);
    expect(value.batch.body[1].error.code).toBe(-32001);
  });
});

describe(`a task stored before its skill met the outage (${backend})`, () => {
  it('streamed while the trust tables fail: the task ends failed with the message, and GetTask says so (1.x and 0.3 clients)', async () => {
    const v1 = await new ClientFactory().createFromUrl(app.base);
    const v03 = await new V03ClientFactory().createFromUrl(app.base);
    const { value } = await during(trustTables, async () => {
      const events: any[] = [];
      for await (const e of v1.sendMessageStream(v1Message(`preflight ${fresh()}`))) events.push(e);
      const old: any[] = [];
      for await (const e of v03.sendMessageStream(v03Message(`trust score for ${fresh()}`))) old.push(e);
      return { events, old };
    });
    const last = value.events.at(-1)!.payload;
    expect(last.$case).toBe('statusUpdate');
    expect(last.value.status.state).toBe(TaskState.TASK_STATE_FAILED);
    expect(last.value.status.message.parts[0].content).toEqual({ $case: 'text', value: MESSAGE });
    const id1 = value.events[0].payload.value.id as string;
    const got1 = await v1.getTask({ tenant: '', id: id1, historyLength: undefined });
    expect(got1.status?.state).toBe(TaskState.TASK_STATE_FAILED);
    expect(got1.status?.message?.parts[0]?.content).toEqual({ $case: 'text', value: MESSAGE });

    expect(value.old.map((e) => (e.kind === 'status-update' ? `${e.kind}:${e.status.state}:${e.final}` : e.kind))).toEqual(['task', 'status-update:failed:true']);
    const got03 = await v03.getTask({ id: value.old[0].id });
    expect(got03.status.state).toBe('failed');
    expect(got03.status.message?.parts[0]).toMatchObject({ kind: 'text', text: MESSAGE });
  });

  it('the database goes away once the streamed task is stored: the stream ends with the refusal, and the task is not left working', async () => {
    const v1 = await new ClientFactory().createFromUrl(app.base);
    const v03 = await new V03ClientFactory().createFromUrl(app.base);
    const { value } = await during(afterTheTaskIsStored, async () => {
      const events: any[] = [];
      const refused = await rejection(
        (async () => {
          for await (const e of v1.sendMessageStream(v1Message(`preflight ${fresh()}`))) events.push(e);
        })(),
      );
      return { events, refused };
    });
    expect(value.events.map((e) => e.payload.$case)).toEqual(['task']);
    expectV1Unavailable(envelopeOf(value.refused));
    const id = value.events[0].payload.value.id as string;
    // Neither the skill's answer nor its failure could be stored: the task says working until
    // the bound for a skill passes (no instance still runs it), then failed.
    expect((await v1.getTask({ tenant: '', id, historyLength: undefined })).status?.state).toBe(TaskState.TASK_STATE_WORKING);
    skewMs = 11 * 60_000;
    try {
      const got = await v1.getTask({ tenant: '', id, historyLength: undefined });
      expect(got.status?.state).toBe(TaskState.TASK_STATE_FAILED);
      expect(got.status?.message?.parts[0]?.content).toMatchObject({ $case: 'text', value: expect.stringMatching(/did not finish/) });
      const old = await v03.getTask({ id });
      expect(old.status.state).toBe('failed');
      // It stays failed: the stored task was moved on, not only shown so.
      skewMs = 0;
      expect((await v03.getTask({ id })).status.state).toBe('failed');
    } finally {
      skewMs = 0;
    }
  });
});

if (backend !== 'postgres') console.log('SKIP the A2A lock test: needs PostgreSQL (set DATABASE_URL); PGlite is one in-process connection');

describe.skipIf(backend !== 'postgres')('ACCESS EXCLUSIVE held on servers from another connection (PostgreSQL)', () => {
  let locked: TestApp;
  let lockedDb: TestDatabase;
  const lock = lockHolder();
  const release = lock.release;
  beforeAll(async () => {
    // A short lock bound, so each call meets it quickly (the default is 5 s).
    const port = await freePort();
    lockedDb = await createTestDatabase();
    const db = openPostgres(lockedDb.url!, { timeouts: { statementTimeoutMs: 2000, lockTimeoutMs: 300 } });
    locked = await startTestApp({ PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` }, { tdb: { ...lockedDb, db } });
  }, 120_000);
  afterAll(async () => {
    await release();
    await locked?.close();
    await lockedDb?.drop();
  });

  it('the skills answer unavailable with both clients, a streamed task ends failed, and all recover when the lock is released', async () => {
    const v1 = await new ClientFactory().createFromUrl(locked.base);
    const v03 = await new V03ClientFactory().createFromUrl(locked.base);
    await lock.hold(locked.tdb.url!, 'LOCK TABLE servers IN ACCESS EXCLUSIVE MODE');
    try {
      const target = fresh();
      expectV1Unavailable(envelopeOf(await rejection(v1.sendMessage(v1Message(`trust score for ${target}`)))));
      expectV03Unavailable(envelopeOf(await rejection(v03.sendMessage(v03Message(`preflight ${target}`)))));
      const events: any[] = [];
      for await (const e of v03.sendMessageStream(v03Message(`trust score for ${target}`))) events.push(e);
      expect(events.at(-1)).toMatchObject({ kind: 'status-update', final: true, status: { state: 'failed', message: { parts: [{ kind: 'text', text: MESSAGE }] } } });
      const stored = await v1.getTask({ tenant: '', id: events[0].id, historyLength: undefined });
      expect(stored.status?.state).toBe(TaskState.TASK_STATE_FAILED);
      await release();
      const after = (await v1.sendMessage(v1Message(`trust score for ${target}`))) as Task;
      expect(after.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    } finally {
      await release();
    }
  }, 120_000);
});
