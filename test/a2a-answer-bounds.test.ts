import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { A2A_LIMITS, createA2aService, type A2aSkillRunner } from '../src/services/a2a.js';
import { a2aTaskStore, type StoredTask } from '../src/store/a2a-tasks.js';
import { answerWithin, jsonBytes, newestWithin } from '../src/domain/a2a-task.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// What one /a2a request can make the service build and send (docs/agents.md "Limits"). A client
// that filled a context with tasks carrying large messages (each up to BODY_LIMIT, all kept in the
// task's history) used to get every task of a ListTasks page whole, 100 to a page, and a batch of
// 50 such calls in one answer: a 4.8 KB request made a 305 MB answer, and the 100 tasks of each
// page were read whole from the database first. Now one HTTP answer holds at most
// A2A_LIMITS.maxAnswerBytes of JSON, a page is cut by its tasks' stored size before they are
// read, and a batch stops running calls when too little is left.

let app: TestApp;
const MAX = A2A_LIMITS.maxAnswerBytes;
const V1 = { 'A2A-Version': '1.0' };
const rpcRaw = (body: unknown) => postJson(`${app.base}/a2a`, body, V1);

/** A stored task of `messages` user messages of about `bytes` each (history as the service keeps it). */
function bigTask(id: string, contextId: string, at: Date, messages: number, bytes: number): StoredTask {
  const history = Array.from({ length: messages }, (_, i) => ({
    kind: 'message',
    role: 'user',
    messageId: `${id}-m${i}`,
    taskId: id,
    contextId,
    parts: [{ kind: 'text', text: 'trust score for https://finance.example.com/mcp' }, { kind: 'data', data: { pad: 'x'.repeat(bytes) } }],
  }));
  return { id, contextId, kind: 'task', status: { state: 'input-required', timestamp: at.toISOString() }, artifacts: [], history };
}

const CONTEXT = 'ctx-big';
const TASKS = 40;
const TASK_BYTES = 200 * 1024;

beforeAll(async () => {
  app = await startTestApp();
  const store = a2aTaskStore(app.tdb.db);
  const t0 = Date.parse('2026-11-01T00:00:00Z');
  // 40 tasks of about 200 KB each (4 messages of 50 KB): 8 MB in one context.
  for (let i = 0; i < TASKS; i++) await store.insert(bigTask(`big-${String(i).padStart(2, '0')}`, CONTEXT, new Date(t0 + i * 1000), 4, TASK_BYTES / 4), new Date(t0));
}, 120_000);
afterAll(async () => app?.close());

describe(`one /a2a answer holds at most ${MAX} bytes (${backend})`, () => {
  it('ListTasks of 100 large tasks answers fewer, within the bound, and its pages still give every task once', async () => {
    const seen: string[] = [];
    let token = '';
    let pages = 0;
    do {
      const res = await rpcRaw({ jsonrpc: '2.0', id: 1, method: 'ListTasks', params: { contextId: CONTEXT, pageSize: 100, pageToken: token } });
      const text = await res.text();
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX);
      const page = JSON.parse(text).result;
      expect(page.totalSize).toBe(TASKS);
      expect(page.tasks.length).toBeGreaterThan(0);
      expect(page.tasks.length).toBeLessThan(TASKS);
      // Whole tasks: a page leaves tasks out, never messages of the tasks it holds.
      for (const t of page.tasks) expect(t.history).toHaveLength(4);
      seen.push(...page.tasks.map((t: { id: string }) => t.id));
      token = page.nextPageToken;
      pages++;
    } while (token !== '' && pages < 20);
    expect(token).toBe('');
    expect(seen).toHaveLength(TASKS);
    expect(new Set(seen).size).toBe(TASKS);
    expect(seen).toEqual([...seen].sort().reverse());
  });

  it('a batch of 50 ListTasks: the answer stays within the bound; calls that no longer fit are not run (-32013)', async () => {
    const batch = Array.from({ length: 50 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ListTasks', params: { contextId: CONTEXT, pageSize: 100 } }));
    const res = await rpcRaw(batch);
    const text = await res.text();
    expect(res.status).toBe(200);
    // Before: about 8 MB per call, 400 MB for the batch.
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX);
    const answers = JSON.parse(text) as { id: number; result?: { tasks: unknown[] }; error?: { code: number; message: string } }[];
    expect(answers.map((a) => a.id)).toEqual(batch.map((b) => b.id));
    expect(answers[0]!.result!.tasks.length).toBeGreaterThan(0);
    const refused = answers.filter((a) => a.error);
    expect(refused.length).toBeGreaterThan(0);
    for (const a of refused) expect(a.error).toMatchObject({ code: -32013, message: expect.stringMatching(/send this call again/) });
  });

  it('a batch of GetTask of one large task: histories lose their oldest messages, the answer stays within the bound', async () => {
    const store = a2aTaskStore(app.tdb.db);
    // 8 messages of 100 KB: 800 KB, within one answer on its own.
    await store.insert(bigTask('huge', 'ctx-huge', new Date(), 8, 100 * 1024), new Date());
    const alone = await json(rpcRaw({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'huge' } }));
    expect(alone.result.history).toHaveLength(8);
    const res = await rpcRaw(Array.from({ length: 50 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'GetTask', params: { id: 'huge' } })));
    const text = await res.text();
    // Before: 50 times 800 KB.
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX);
    const answers = JSON.parse(text) as { result?: { history?: { messageId: string }[] }; error?: { code: number } }[];
    expect(answers).toHaveLength(50);
    expect(answers[0]!.result!.history).toHaveLength(8);
    const second = answers[1]!.result!.history!;
    expect(second.length).toBeGreaterThan(0);
    expect(second.length).toBeLessThan(8);
    // The newest messages are the ones kept.
    expect(second.at(-1)!.messageId).toBe('huge-m7');
    for (const a of answers.slice(2)) expect(a.error?.code === -32013 || (a.result!.history ?? []).length < second.length).toBe(true);
  });

  it('the same in 0.3 (tasks/get)', async () => {
    const res = await postJson(`${app.base}/a2a`, Array.from({ length: 20 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'tasks/get', params: { id: 'huge' } })));
    const text = await res.text();
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX);
    const answers = JSON.parse(text) as { result?: { history: unknown[] }; error?: { code: number } }[];
    expect(answers[0]!.result!.history).toHaveLength(8);
    expect(answers[1]!.result!.history.length).toBeLessThan(8);
  });

  it('a task keeps only the newest messages of its history that fit one answer', async () => {
    // Follow-ups on a task waiting for input: each message near BODY_LIMIT (64 KiB).
    const first = await json(rpcRaw({ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { role: 'ROLE_USER', parts: [{ text: 'trust score' }], messageId: crypto.randomUUID() } } }));
    const taskId = first.result.task.id as string;
    expect(first.result.task.status.state).toBe('TASK_STATE_INPUT_REQUIRED');
    const store = a2aTaskStore(app.tdb.db);
    const t = (await store.get(taskId))!;
    // 30 stored messages of 60 KB (as if sent one by one): the next message keeps what fits.
    await store.replaceIfState({ ...bigTask(taskId, t.contextId, new Date(), 30, 60 * 1024), status: t.status }, 'input-required');
    const next = await json(rpcRaw({ jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: { role: 'ROLE_USER', taskId, parts: [{ text: 'what?' }], messageId: crypto.randomUUID() } } }));
    expect(next.result.task.id).toBe(taskId);
    const kept = (await store.get(taskId))!;
    expect(jsonBytes(kept.history)).toBeLessThanOrEqual(MAX);
    expect((kept.history as unknown[]).length).toBeLessThan(32);
  });
});

describe('a streamed message whose client goes away', () => {
  it('still ends its task (it used to stay working until the retention deleted it)', async () => {
    const contextId = `ctx-gone-${crypto.randomUUID()}`;
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'SendStreamingMessage',
      params: { message: { role: 'ROLE_USER', contextId, parts: [{ text: 'trust score for https://nobody.example.com/mcp' }], messageId: crypto.randomUUID() } },
    });
    const url = new URL(`${app.base}/a2a`);
    // The client sends the message and goes away before any event reaches it.
    await new Promise<void>((resolve) => {
      const req = request({ host: url.hostname, port: url.port, path: '/a2a', method: 'POST', headers: { 'content-type': 'application/json', 'a2a-version': '1.0', 'content-length': Buffer.byteLength(body) } });
      req.on('error', () => undefined);
      req.end(body, () => {
        req.destroy();
        resolve();
      });
    });
    let states: string[] = [];
    for (let i = 0; i < 60; i++) {
      states = (await json(rpcRaw({ jsonrpc: '2.0', id: 2, method: 'ListTasks', params: { contextId } }))).result.tasks.map((t: { status: { state: string } }) => t.status.state);
      if (states.length === 1 && states[0] !== 'TASK_STATE_WORKING') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(states).toEqual(['TASK_STATE_COMPLETED']);
  });

  it('a stream closed after its first event (the task, working) still ends the task', async () => {
    const runner: A2aSkillRunner = { run: async () => ({ data: { ok: true }, text: 'done', name: 'trust-record', description: 'Trust record' }) };
    const a2a = createA2aService({ db: app.tdb.db, now: () => new Date() }, runner);
    const events = await a2a.sendStreaming({ kind: 'message', role: 'user', messageId: crypto.randomUUID(), parts: [{ kind: 'text', text: 'trust score for https://nobody.example.com/mcp' }] });
    const it = events[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.value).toMatchObject({ kind: 'task', task: { status: { state: 'working' } } });
    // What the SSE writer does when it finds the client gone: it closes the stream.
    await it.return?.();
    const id = (first.value as { task: { id: string } }).task.id;
    let state = '';
    for (let i = 0; i < 40 && state !== 'completed'; i++) {
      state = (await a2a.get(id)).status.state;
      if (state !== 'completed') await new Promise((r) => setTimeout(r, 25));
    }
    // Before: 'working' for good (the skill never ran).
    expect(state).toBe('completed');
  });
});

describe('cutting a history (pure)', () => {
  const msgs = Array.from({ length: 10 }, (_, i) => ({ i, pad: 'y'.repeat(98) }));
  it('keeps the newest messages that fit, brackets and commas counted', () => {
    const one = jsonBytes(msgs[0]);
    expect(newestWithin(msgs, 2 + one)).toEqual(msgs.slice(-1));
    expect(newestWithin(msgs, 2 + 3 * one + 2)).toEqual(msgs.slice(-3));
    expect(newestWithin(msgs, 2 + 3 * one + 1)).toEqual(msgs.slice(-2));
    expect(newestWithin(msgs, 1)).toEqual([]);
    expect(jsonBytes(newestWithin(msgs, 500))).toBeLessThanOrEqual(500);
  });
  it('answers whole when it fits, else within the bound', () => {
    const build = (h: unknown[]) => ({ id: 't', history: h });
    expect(answerWithin(msgs, undefined, build)).toEqual(build(msgs));
    expect(answerWithin(msgs, 1_000_000, build)).toEqual(build(msgs));
    const cut = answerWithin(msgs, 600, build);
    expect(jsonBytes(cut)).toBeLessThanOrEqual(600);
    expect((cut.history as unknown[]).length).toBeGreaterThan(0);
    expect(answerWithin(msgs, 10, build)).toEqual(build([]));
  });
});
