import { createServer } from 'node:net';
import { AgentCard, SendMessageRequest, Task as V1Task, TaskState, verifyAgentCardSignature, type Task } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { ClientFactory as V03ClientFactory } from '@a2a-js/sdk-v03/client';
import type { Task as V03Task } from '@a2a-js/sdk-v03';
import type { JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { A2A_LIMITS, createA2aService, subscriptionsPerClient, type A2aSkillRunner } from '../src/services/a2a.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { MAX_JSON_DEPTH } from '../src/domain/json-depth.js';

// /a2a speaks A2A 1.0 and 0.3 (issue 19 items 1 and 2): JSON-RPC 2.0 exactly, the 1.0 methods
// with 1.0 shapes, enums and error codes, the 0.3 methods with 0.3 shapes, the stock
// @a2a-js/sdk 1.x client (no compatibility switch) and the 0.3 client, both driven from the one
// agent card, whose signature verifies against our JWKS.

let app: TestApp;
const SERVER = 'https://finance.example.com/mcp';

/** A free loopback port, so PUBLIC_BASE_URL (and with it the agent card's urls) is the real address. */
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

beforeAll(async () => {
  const port = await freePort();
  app = await startTestApp({ PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` });
  for (let i = 0; i < 4; i++) await postJson(`${app.base}/api/report`, { server_url: SERVER, success: i > 0, latency_ms: 80, tool_name: 'get_quote' });
}, 120_000);
afterAll(async () => app?.close());

const V1 = { 'A2A-Version': '1.0' };
const rpc = (body: unknown, headers: Record<string, string> = {}) => postJson(`${app.base}/a2a`, body, headers);
const rpc1 = (method: string, params?: unknown, id: unknown = 1) => json(rpc({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) }, V1));
const raw = (body: string) => fetch(`${app.base}/a2a`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
const send = (text: string, id: unknown = 1, extra: Record<string, unknown> = {}) =>
  rpc({ jsonrpc: '2.0', id, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text }], messageId: `m-${Math.random()}`, kind: 'message', ...extra } } });
const send1 = (text: string, extra: Record<string, unknown> = {}, configuration?: unknown) =>
  rpc1('SendMessage', { message: { role: 'ROLE_USER', parts: [{ text }], messageId: crypto.randomUUID(), ...extra }, ...(configuration ? { configuration } : {}) });

/** A JSON value as the A2A 1.0 protobuf schema reads and writes it: unknown or mistyped members vanish. */
const protoRoundTrip = (task: unknown) => V1Task.toJSON(V1Task.fromJSON(task));

/** The `data:` payloads of a Server-Sent Events response, parsed. */
async function sseEvents(res: Response): Promise<any[]> {
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const text = await res.text();
  return text
    .split('\n\n')
    .map((block) => block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n'))
    .filter((d) => d !== '')
    .map((d) => JSON.parse(d));
}

describe(`JSON-RPC 2.0 section 7 examples, with this service's methods (${backend})`, () => {
  it('a call to a non-existent method: -32601', async () => {
    const res = await rpc({ jsonrpc: '2.0', method: 'foobar', id: '1' });
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ jsonrpc: '2.0', id: '1', error: { code: -32601, message: expect.any(String) } });
  });

  it('a call with invalid JSON: -32700, id null', async () => {
    expect(await json(raw('{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]'))).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: expect.any(String) } });
  });

  it('a call with an invalid Request object: -32600, id null', async () => {
    expect(await json(rpc({ jsonrpc: '2.0', method: 1, params: 'bar' }))).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.any(String) } });
  });

  it('a batch with invalid JSON: a single -32700', async () => {
    const body = '[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},{"jsonrpc": "2.0", "method"]';
    expect(await json(raw(body))).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: expect.any(String) } });
  });

  it('an empty array: a single -32600', async () => {
    expect(await json(rpc([]))).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.any(String) } });
  });

  it('an invalid batch of one: an array with one -32600', async () => {
    expect(await json(rpc([1]))).toEqual([{ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.any(String) } }]);
  });

  it('an invalid batch of three: three -32600', async () => {
    const r = await json(rpc([1, 2, 3]));
    expect(r).toHaveLength(3);
    for (const e of r) expect(e).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.any(String) } });
  });

  it('a mixed batch: answers in order, notifications get none', async () => {
    const r = await json(
      rpc([
        { jsonrpc: '2.0', method: 'tasks/get', params: { id: 'nope' }, id: '1' },
        { jsonrpc: '2.0', method: 'tasks/get', params: { id: 'nope' } },
        { jsonrpc: '2.0', method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: `trust score for ${SERVER}` }], messageId: 'b1', kind: 'message' } }, id: '2' },
        { foo: 'boo' },
        { jsonrpc: '2.0', method: 'foo.get', params: { name: 'myself' }, id: '5' },
        { jsonrpc: '2.0', method: 'tasks/get', id: '9' },
        { jsonrpc: '2.0', method: 'message/stream', params: { message: { role: 'user', parts: [{ kind: 'text', text: 'x' }], messageId: 'b2', kind: 'message' } }, id: '10' },
      ]),
    );
    expect(r.map((x: { id: unknown }) => x.id)).toEqual(['1', '2', null, '5', '9', '10']);
    expect(r[0].error.code).toBe(-32001);
    expect(r[1].result.kind).toBe('task');
    expect(r[2].error.code).toBe(-32600);
    expect(r[3].error.code).toBe(-32601);
    expect(r[4].error.code).toBe(-32602);
    expect(r[5].error).toMatchObject({ code: -32004, message: expect.stringMatching(/batch/) });
  });

  it('a batch of notifications only: no content', async () => {
    const res = await rpc([
      { jsonrpc: '2.0', method: 'tasks/get', params: { id: 'a' } },
      { jsonrpc: '2.0', method: 'tasks/get', params: { id: 'b' } },
    ]);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
  });
});

describe('invalid requests', () => {
  it('-32600 for a missing method, a wrong jsonrpc and a bad id type', async () => {
    expect((await json(rpc({ jsonrpc: '2.0', id: 7 }))).error.code).toBe(-32600);
    expect(await json(rpc({ jsonrpc: '1.0', id: 7, method: 'tasks/get', params: { id: 'x' } }))).toMatchObject({ id: 7, error: { code: -32600 } });
    expect(await json(rpc({ id: 7, method: 'tasks/get', params: { id: 'x' } }))).toMatchObject({ error: { code: -32600 } });
    expect(await json(rpc({ jsonrpc: '2.0', id: { a: 1 }, method: 'tasks/get', params: { id: 'x' } }))).toMatchObject({ id: null, error: { code: -32600 } });
    expect(await json(rpc({ jsonrpc: '2.0', id: [1], method: 'tasks/get' }))).toMatchObject({ id: null, error: { code: -32600 } });
    expect((await json(rpc('hello'))).error.code).toBe(-32600);
  });

  it('-32602 for bad params (0.3)', async () => {
    const bad = [
      { message: 'hi' },
      { message: { role: 'user', parts: [], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for x' }] } },
      { message: { role: 'agent', parts: [{ kind: 'text', text: 'trust score for x' }], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'text', text: 'x'.repeat(5000) }], messageId: 'x' } },
      { message: { role: 'user', parts: [{ text: 'trust score for x' }], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for x' }], messageId: 'x' }, configuration: { historyLength: -1 } },
    ];
    for (const params of bad) expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'message/send', params }))).error.code, JSON.stringify(params).slice(0, 80)).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: {} }))).error.code).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'x', historyLength: -1 } }))).error.code).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'message/send', params: [1, 2] }))).error.code).toBe(-32602);
  });

  it('-32005 for a message with no text part: the skills read text/plain', async () => {
    const r = await json(rpc({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'data', data: {} }], messageId: 'x' } } }));
    expect(r.error.code).toBe(-32005);
    const noJsonNoText = await send1(`trust score for ${SERVER}`, {}, { acceptedOutputModes: ['image/png'] });
    expect(noJsonNoText.error).toMatchObject({ code: -32005, data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'CONTENT_TYPE_NOT_SUPPORTED', domain: 'a2a-protocol.org' }] });
  });

  it('-32001 for an unknown task', async () => {
    expect(await json(rpc({ jsonrpc: '2.0', id: 'q', method: 'tasks/get', params: { id: '00000000-0000-0000-0000-000000000000' } }))).toMatchObject({ id: 'q', error: { code: -32001 } });
  });
});

describe('A2A-Version negotiation', () => {
  it('no header means 0.3; 1.0 methods then answer -32601 naming the header, and the reverse', async () => {
    const v03 = await json(rpc({ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: {} }));
    expect(v03.error).toMatchObject({ code: -32601, message: expect.stringMatching(/A2A 1\.0 method.*message\/send.*A2A-Version: 1\.0/) });
    const v1 = await rpc1('message/send', {});
    expect(v1.error).toMatchObject({ code: -32601, message: expect.stringMatching(/A2A 0\.3 method.*SendMessage/) });
  });

  it('an unsupported version is -32009 VersionNotSupportedError, with the versions we speak', async () => {
    for (const v of ['2.0', '0.2', '0.5', 'banana', '1.1']) {
      const r = await json(rpc({ jsonrpc: '2.0', id: 3, method: 'GetTask', params: { id: 'x' } }, { 'A2A-Version': v }));
      expect(r, v).toMatchObject({
        id: 3,
        error: { code: -32009, data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'VERSION_NOT_SUPPORTED', metadata: { supportedVersions: '1.0, 0.3' } }] },
      });
    }
  });

  it('a patch number is ignored, and the query parameter works like the header', async () => {
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'nope' } }, { 'A2A-Version': '1.0.0' }))).error.code).toBe(-32001);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'nope' } }, { 'A2A-Version': '0.3.0' }))).error.code).toBe(-32001);
    const viaQuery = await json(postJson(`${app.base}/a2a?A2A-Version=1.0`, { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'nope' } }));
    expect(viaQuery.error.code).toBe(-32001);
  });
});

describe('A2A 0.3: message/send, tasks/get, tasks/cancel', () => {
  it('"trust score for <server>" completes a task whose artifact is the trust record', async () => {
    const r = await json(send(`trust score for ${SERVER}`));
    const task = r.result;
    expect(task).toMatchObject({ kind: 'task', status: { state: 'completed' }, id: expect.any(String), contextId: expect.any(String) });
    expect(new Date(task.status.timestamp).toString()).not.toBe('Invalid Date');
    const rest = await json(fetch(`${app.base}/api/trust?url=${encodeURIComponent(SERVER)}`));
    const [data, text] = task.artifacts[0].parts;
    expect(data.kind).toBe('data');
    expect(data.data).toMatchObject({ found: true, server: rest.server, metrics: rest.metrics, verdict: rest.verdict });
    expect(text).toMatchObject({ kind: 'text', text: expect.stringContaining(String(rest.server.trust_score)) });
    expect(task.history[0]).toMatchObject({ role: 'user', taskId: task.id, contextId: task.contextId, kind: 'message' });

    const got = await json(rpc({ jsonrpc: '2.0', id: 2, method: 'tasks/get', params: { id: task.id } }));
    expect(got.result).toEqual(task);
    const trimmed = await json(rpc({ jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { id: task.id, historyLength: 0 } }));
    expect(trimmed.result.history).toEqual([]);
  });

  it('an untracked server completes with UNRATED; unknown phrasing is rejected with usage help', async () => {
    const r = await json(send('trust score for https://unknown.example.net/mcp'));
    expect(r.result.artifacts[0].parts[0].data).toMatchObject({ found: false, verdict: 'UNRATED' });
    const q = await json(send('what is the weather'));
    expect(q.result.status.state).toBe('rejected');
    expect(q.result.status.message.parts[0].text).toMatch(/trust score for <server>/);
  });

  it('"preflight <server>" runs the pre-flight skill', async () => {
    const r = (await json(send(`preflight ${SERVER}`))).result;
    expect(r.status.state).toBe('completed');
    const data = r.artifacts[0].parts[0].data;
    expect(data).toMatchObject({ verdict: expect.stringMatching(/^(PASS|UNCERTAIN|FAIL)$/), receipt_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect((await app.obs.services.receipts.verify(data.diligence_receipt)).valid).toBe(true);
  });

  it('a message to an ended task is -32004; to an unknown task -32001; cancel of an ended task -32002', async () => {
    const t = (await json(send(`trust score for ${SERVER}`))).result;
    const msg = (taskId: string) => ({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for x' }], messageId: 'z', taskId, kind: 'message' } } });
    expect((await json(rpc(msg(t.id)))).error.code).toBe(-32004);
    expect((await json(rpc(msg('missing')))).error.code).toBe(-32001);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/cancel', params: { id: t.id } }))).error.code).toBe(-32002);
  });

  it('push notification methods are -32003, the extended card -32004', async () => {
    for (const m of ['tasks/pushNotificationConfig/set', 'tasks/pushNotificationConfig/get', 'tasks/pushNotificationConfig/list', 'tasks/pushNotificationConfig/delete']) {
      expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: m, params: { id: 'x' } }))).error.code, m).toBe(-32003);
    }
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'agent/getAuthenticatedExtendedCard' }))).error.code).toBe(-32004);
  });

  it('GET /a2a is the descriptor with both versions\' methods and the card\'s skills', async () => {
    const d = await json(fetch(`${app.base}/a2a`));
    const card = await json(fetch(`${app.base}/.well-known/agent-card.json`));
    expect(d.versions).toEqual(['1.0', '0.3']);
    expect(d.methods.map((m: { name: string }) => m.name)).toEqual(expect.arrayContaining(['message/send', 'tasks/get', 'SendMessage', 'GetTask', 'ListTasks', 'CancelTask']));
    expect(d.skills).toEqual(card.skills);
    // The usage examples work as written.
    expect((await json(rpc(d.usage.request))).result.kind).toBe('task');
    expect((await json(rpc(d.usage.v1.request, d.usage.v1.headers))).result.task.status.state).toBe('TASK_STATE_COMPLETED');
  });
});

describe('A2A 1.0 on the wire', () => {
  it('SendMessage answers {task} in 1.0 form: TASK_STATE_*, ROLE_*, parts without kind; valid for the 1.0 schema', async () => {
    const r = await send1(`trust score for ${SERVER}`);
    const task = r.result.task;
    expect(task.status.state).toBe('TASK_STATE_COMPLETED');
    expect(task.status.message).toMatchObject({ role: 'ROLE_AGENT', parts: [{ text: expect.stringContaining('Trust score for') }] });
    expect(task.history[0]).toMatchObject({ role: 'ROLE_USER', taskId: task.id, contextId: task.contextId, parts: [{ text: `trust score for ${SERVER}` }] });
    expect(task.artifacts[0].parts[0]).toMatchObject({ data: { found: true, server: { url: SERVER } }, mediaType: 'application/json' });
    expect(task.artifacts[0].parts[1]).toEqual({ text: expect.any(String) });
    expect(JSON.stringify(task)).not.toMatch(/"kind"/);
    expect(protoRoundTrip(task)).toEqual(task);

    const got = await rpc1('GetTask', { id: task.id });
    expect(got.result).toEqual(task);
    expect((await rpc1('GetTask', { id: task.id, historyLength: 0 })).result).not.toHaveProperty('history');
    expect((await rpc1('GetTask', { id: task.id, historyLength: 1 })).result.history).toHaveLength(1);
  });

  it('1.0 validation: role, parts, ids; 0.3 shapes get a hint', async () => {
    const bad = [
      { message: { role: 'user', parts: [{ text: 'x' }], messageId: 'a' } },
      { message: { role: 'ROLE_AGENT', parts: [{ text: 'x' }], messageId: 'a' } },
      { message: { role: 'ROLE_USER', parts: [{ kind: 'file', file: { uri: 'https://x.example/a.txt' } }], messageId: 'a' } },
      { message: { role: 'ROLE_USER', parts: [{ text: 'x', data: {} }], messageId: 'a' } },
      { message: { role: 'ROLE_USER', parts: [{ text: 'x' }] } },
      { message: { role: 'ROLE_USER', parts: [], messageId: 'a' } },
      {},
    ];
    for (const params of bad) expect((await rpc1('SendMessage', params)).error?.code, JSON.stringify(params)).toBe(-32602);
    expect((await rpc1('SendMessage', bad[0])).error.message).toMatch(/ROLE_USER/);
    expect((await rpc1('SendMessage', bad[2])).error.message).toMatch(/no "kind"/);
    expect((await rpc1('GetTask', {})).error.code).toBe(-32602);
    expect((await rpc1('GetTask', { id: 'x', historyLength: -2 })).error.code).toBe(-32602);
  });

  it('push notification methods are -32003 PushNotificationNotSupportedError; GetExtendedAgentCard -32004', async () => {
    for (const m of ['CreateTaskPushNotificationConfig', 'GetTaskPushNotificationConfig', 'ListTaskPushNotificationConfigs', 'DeleteTaskPushNotificationConfig']) {
      const r = await rpc1(m, { taskId: 'x', id: 'y', url: 'https://hook.example.com' });
      expect(r.error, m).toMatchObject({ code: -32003, data: [{ reason: 'PUSH_NOTIFICATION_NOT_SUPPORTED' }] });
    }
    const withPush = await send1(`trust score for ${SERVER}`, {}, { taskPushNotificationConfig: { url: 'https://hook.example.com/a2a' } });
    expect(withPush.error.code).toBe(-32003);
    expect((await rpc1('GetExtendedAgentCard')).error).toMatchObject({ code: -32004, data: [{ reason: 'UNSUPPORTED_OPERATION' }] });
  });

  it('errors carry google.rpc.ErrorInfo details', async () => {
    expect((await rpc1('GetTask', { id: 'no-such-task' })).error).toEqual({
      code: -32001,
      message: expect.any(String),
      data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org', metadata: { taskId: 'no-such-task' } }],
    });
  });

  it('SendStreamingMessage answers Server-Sent Events: the task, its artifact, the final status', async () => {
    const res = await fetch(`${app.base}/a2a`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V1 },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'st', method: 'SendStreamingMessage', params: { message: { role: 'ROLE_USER', parts: [{ text: `preflight ${SERVER}` }], messageId: 's1' } } }),
    });
    const events = await sseEvents(res);
    expect(events.map((e) => Object.keys(e.result)[0])).toEqual(['task', 'artifactUpdate', 'statusUpdate']);
    for (const e of events) expect(e).toMatchObject({ jsonrpc: '2.0', id: 'st' });
    const [first, artifact, status] = events.map((e) => e.result);
    expect(first.task.status.state).toBe('TASK_STATE_WORKING');
    expect(artifact.artifactUpdate).toMatchObject({ taskId: first.task.id, artifact: { name: 'preflight-verdict' }, lastChunk: true });
    expect(status.statusUpdate).toMatchObject({ taskId: first.task.id, status: { state: 'TASK_STATE_COMPLETED' } });
    expect((await rpc1('GetTask', { id: first.task.id })).result.status.state).toBe('TASK_STATE_COMPLETED');
  });

  it('a streaming request with bad params is a plain JSON-RPC error, not a stream', async () => {
    const res = await rpc({ jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage', params: { message: {} } }, V1);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect((await json(res)).error.code).toBe(-32602);
  });
});

describe('text understanding, end to end (issue 19 item 2)', () => {
  it('trailing punctuation, courtesies, quotes, angle brackets and Markdown links never reach the target', async () => {
    for (const text of [`trust score for ${SERVER}.`, `trust score for ${SERVER} please`, `trust score for "${SERVER}"`, `trust score for <${SERVER}>`, `trust score for [finance](${SERVER})`]) {
      const task = (await send1(text)).result.task;
      expect(task.status.state, text).toBe('TASK_STATE_COMPLETED');
      expect(task.artifacts[0].parts[0].data, text).toMatchObject({ found: true, target: SERVER, server: { url: SERVER } });
    }
  });

  it('a message naming no server waits in input-required asking for one; the answer on the same task completes it', async () => {
    const asked = (await send1('trust score for')).result.task;
    expect(asked.status).toMatchObject({ state: 'TASK_STATE_INPUT_REQUIRED', message: { role: 'ROLE_AGENT', parts: [{ text: expect.stringMatching(/Which MCP server/) }] } });
    expect(asked).not.toHaveProperty('artifacts');
    expect(JSON.stringify(asked)).not.toMatch(/UNRATED|found/);

    const answered = (await send1(`it's ${SERVER}, thanks`, { taskId: asked.id, contextId: asked.contextId })).result.task;
    expect(answered.id).toBe(asked.id);
    expect(answered.status.state).toBe('TASK_STATE_COMPLETED');
    expect(answered.artifacts[0].parts[0].data).toMatchObject({ found: true, server: { url: SERVER } });
    expect(answered.history.map((m: { role: string }) => m.role)).toEqual(['ROLE_USER', 'ROLE_AGENT', 'ROLE_USER', 'ROLE_AGENT']);

    // 0.3 spelling of the same flow.
    const v03 = (await json(send('preflight'))).result;
    expect(v03.status.state).toBe('input-required');
    const again = (await json(send('please', 1, { taskId: v03.id }))).result;
    expect(again.status.state).toBe('input-required');
    const done = (await json(send(SERVER, 1, { taskId: v03.id }))).result;
    expect(done).toMatchObject({ id: v03.id, status: { state: 'completed' }, metadata: { skill: 'preflight' } });
  });

  it('a waiting task can be canceled once; an answer after that is refused', async () => {
    const asked = (await send1('preflight')).result.task;
    const canceled = (await rpc1('CancelTask', { id: asked.id })).result;
    expect(canceled.status.state).toBe('TASK_STATE_CANCELED');
    expect((await rpc1('CancelTask', { id: asked.id })).error).toMatchObject({ code: -32002, data: [{ reason: 'TASK_NOT_CANCELABLE' }] });
    expect((await send1(SERVER, { taskId: asked.id })).error.code).toBe(-32004);
    expect((await send1(SERVER, { taskId: asked.id, contextId: 'another' })).error.code).toBe(-32602);
  });
});

describe('ListTasks', () => {
  it('pages a context newest first with nextPageToken; artifacts only on request; contextId required', async () => {
    const contextId = `ctx-${crypto.randomUUID()}`;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await send1(`trust score for ${SERVER}`, { contextId })).result.task.id);
    ids.push((await send1('trust score for', { contextId })).result.task.id);
    const seen: string[] = [];
    let token = '';
    let pages = 0;
    do {
      const page = (await rpc1('ListTasks', { contextId, pageSize: 4, pageToken: token })).result;
      expect(page).toMatchObject({ pageSize: 4, totalSize: 6, nextPageToken: expect.any(String) });
      for (const t of page.tasks) {
        expect(t).not.toHaveProperty('artifacts');
        expect(protoRoundTrip(t)).toEqual(t);
      }
      seen.push(...page.tasks.map((t: { id: string }) => t.id));
      token = page.nextPageToken;
      pages++;
    } while (token !== '');
    expect(pages).toBe(2);
    expect(seen).toEqual([...ids].reverse());

    const waiting = (await rpc1('ListTasks', { contextId, status: 'TASK_STATE_INPUT_REQUIRED' })).result;
    expect(waiting).toMatchObject({ totalSize: 1, nextPageToken: '', tasks: [{ id: ids[5], status: { state: 'TASK_STATE_INPUT_REQUIRED' } }] });
    const withArtifacts = (await rpc1('ListTasks', { contextId, includeArtifacts: true, historyLength: 0, pageSize: 1 })).result;
    expect(withArtifacts.tasks[0]).not.toHaveProperty('history');
    expect((await rpc1('ListTasks', { contextId, includeArtifacts: true })).result.tasks[1].artifacts).toHaveLength(1);
    const future = (await rpc1('ListTasks', { contextId, statusTimestampAfter: '2999-01-01T00:00:00Z' })).result;
    expect(future).toEqual({ tasks: [], nextPageToken: '', pageSize: 50, totalSize: 0 });

    expect((await rpc1('ListTasks', {})).error).toMatchObject({ code: -32602, message: expect.stringMatching(/contextId is required/) });
    expect((await rpc1('ListTasks', { contextId, pageSize: 150 })).error.code).toBe(-32602);
    expect((await rpc1('ListTasks', { contextId, status: 'TASK_STATE_RUNNING' })).error.code).toBe(-32602);
    expect((await rpc1('ListTasks', { contextId, pageToken: 'not-ours' })).error.code).toBe(-32602);
  });
});

describe('the agent card', () => {
  it('is a 1.0 card (supportedInterfaces for 1.0 and 0.3) that 0.3 clients read (protocolVersion, url, preferredTransport)', async () => {
    const card = await json(fetch(`${app.base}/.well-known/agent-card.json`));
    expect(card).toMatchObject({
      protocolVersion: '0.3.0',
      url: `${app.base}/a2a`,
      preferredTransport: 'JSONRPC',
      supportedInterfaces: [
        { url: `${app.base}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
        { url: `${app.base}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
      ],
      capabilities: { streaming: true, pushNotifications: false, extendedAgentCard: false },
    });
    // Every member the 1.0 schema requires is there and survives the 1.0 protobuf reading.
    const v1 = AgentCard.toJSON(AgentCard.fromJSON(card)) as Record<string, any>;
    for (const k of ['name', 'description', 'supportedInterfaces', 'version', 'capabilities', 'defaultInputModes', 'defaultOutputModes', 'skills', 'signatures']) expect(v1, k).toHaveProperty(k);
    expect(v1.supportedInterfaces).toEqual(card.supportedInterfaces);
    expect(v1.skills).toEqual(card.skills);
  });

  it('carries a signature by our Ed25519 key over the canonical 1.0 card, verifiable with our JWKS', async () => {
    const card = await json(fetch(`${app.base}/.well-known/agent-card.json`));
    const jwks = await json(fetch(`${app.base}/.well-known/jwks.json`));
    const header = JSON.parse(Buffer.from(card.signatures[0].protected, 'base64url').toString('utf8'));
    expect(header).toEqual({ alg: 'EdDSA', typ: 'JOSE', kid: jwks.keys[0].kid, jku: `${app.base}/.well-known/jwks.json` });
    const asked: string[] = [];
    const verify = verifyAgentCardSignature(async (kid, jku) => {
      asked.push(`${kid} ${jku}`);
      const res = await fetch(jku!);
      const key = ((await res.json()) as { keys: JWK[] }).keys.find((k) => k.kid === kid);
      return key!;
    });
    await verify(card);
    expect(asked).toEqual([`${jwks.keys[0].kid} ${app.base}/.well-known/jwks.json`]);
    // A changed card no longer verifies.
    await expect(verify({ ...card, description: 'Trust me.' })).rejects.toThrow(/No valid signatures/);
    await expect(verify({ ...card, skills: card.skills.slice(1) })).rejects.toThrow(/No valid signatures/);
    // agent.json is the same signed card.
    expect(await json(fetch(`${app.base}/.well-known/agent.json`))).toEqual(card);
  });
});

describe('stock @a2a-js/sdk 1.x client (no compatibility switch)', () => {
  it('discovers the card, sends, gets, lists, streams and cancels', async () => {
    const client = await new ClientFactory().createFromUrl(app.base);
    expect(client.protocolVersion).toBe('1.0');
    const message = (text: string, extra: Record<string, unknown> = {}) => SendMessageRequest.fromJSON({ message: { role: 'ROLE_USER', messageId: crypto.randomUUID(), parts: [{ text }], ...extra } });

    const result = await client.sendMessage(message(`trust score for ${SERVER}`));
    expect('status' in result).toBe(true);
    const task = result as Task;
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(task.artifacts[0]?.parts[0]?.content).toMatchObject({ $case: 'data', value: { found: true, server: { url: SERVER } } });

    const fetched = await client.getTask({ tenant: '', id: task.id, historyLength: undefined });
    expect(fetched.id).toBe(task.id);
    expect(fetched.history.map((m) => m.role)).toEqual([1, 2]);

    const listed = await client.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 10, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: true });
    expect(listed).toMatchObject({ totalSize: 1, nextPageToken: '', pageSize: 10 });
    expect(listed.tasks[0]?.id).toBe(task.id);

    const events = [];
    for await (const e of client.sendMessageStream(message(`preflight ${SERVER}`))) events.push(e.payload?.$case);
    expect(events).toEqual(['task', 'artifactUpdate', 'statusUpdate']);

    await expect(client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).rejects.toMatchObject({ name: 'TaskNotCancelableError' });
    await expect(client.getTask({ tenant: '', id: 'missing', historyLength: undefined })).rejects.toMatchObject({ name: 'TaskNotFoundError' });

    // input-required, then the answer while a subscriber watches the task.
    const asked = (await client.sendMessage(message('trust score for'))) as Task;
    expect(asked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const watched: string[] = [];
    const watching = (async () => {
      for await (const e of client.resubscribeTask({ tenant: '', id: asked.id })) {
        watched.push(e.payload?.$case === 'statusUpdate' ? `status:${TaskState[e.payload.value.status!.state]}` : e.payload!.$case);
      }
    })();
    // The subscription has delivered its first event (the task) before the answer is sent.
    while (watched.length === 0) await new Promise((r) => setTimeout(r, 20));
    const answered = (await client.sendMessage(message(SERVER, { taskId: asked.id, contextId: asked.contextId }))) as Task;
    expect(answered.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    await watching;
    expect(watched).toEqual(['task', 'artifactUpdate', 'status:TASK_STATE_COMPLETED']);
    await expect(client.resubscribeTask({ tenant: '', id: asked.id }).next()).rejects.toMatchObject({ name: 'UnsupportedOperationError' });
  });
});

describe('stock A2A 0.3 client (@a2a-js/sdk 0.3)', () => {
  it('discovers the same card, sends, gets, streams and cancels in 0.3', async () => {
    const client = await new V03ClientFactory().createFromUrl(app.base);
    const msg = (text: string, extra: Record<string, unknown> = {}) => ({ message: { kind: 'message' as const, role: 'user' as const, messageId: crypto.randomUUID(), parts: [{ kind: 'text' as const, text }], ...extra } });
    const result = await client.sendMessage(msg(`trust score for ${SERVER}`));
    expect(result.kind).toBe('task');
    const task = result as V03Task;
    expect(task.status.state).toBe('completed');
    const fetched = await client.getTask({ id: task.id });
    expect(fetched.artifacts?.[0]?.parts[0]).toMatchObject({ kind: 'data' });

    const kinds: string[] = [];
    for await (const e of client.sendMessageStream(msg(`preflight ${SERVER}`))) kinds.push(e.kind === 'status-update' ? `status-update:${e.status.state}:${e.final}` : e.kind);
    expect(kinds).toEqual(['task', 'artifact-update', 'status-update:completed:true']);

    const asked = (await client.sendMessage(msg('trust score for'))) as V03Task;
    expect(asked.status.state).toBe('input-required');
    expect((await client.cancelTask({ id: asked.id })).status.state).toBe('canceled');
    await expect(client.cancelTask({ id: task.id })).rejects.toThrow();
  });
});

describe('subscriptions across instances', () => {
  it('a subscriber on one instance sees the answer another instance stored (polling)', async () => {
    const runner: A2aSkillRunner = { run: async (skill, server) => ({ data: { skill, server }, text: `ran ${skill} on ${server}`, name: 'r', description: 'r' }) };
    const a = createA2aService({ db: app.obs.db, now: () => new Date() }, runner, { pollMs: 50 });
    const b = createA2aService({ db: app.obs.db, now: () => new Date() }, runner, { pollMs: 50 });
    const asked = await a.send({ kind: 'message', role: 'user', messageId: 'x1', parts: [{ kind: 'text', text: 'trust score for' }] });
    const seen: string[] = [];
    const sub = await a.subscribe(asked.id);
    const reading = (async () => {
      for await (const e of sub) seen.push(e.kind === 'status-update' ? `${e.kind}:${e.status.state}` : e.kind);
    })();
    while (seen.length === 0) await new Promise((r) => setTimeout(r, 10));
    const done = await b.send({ kind: 'message', role: 'user', messageId: 'x2', taskId: asked.id, parts: [{ kind: 'text', text: 'weather.example.com/mcp' }] });
    expect(done.status.state).toBe('completed');
    await reading;
    expect(seen).toEqual(['task', 'artifact-update', 'status-update:completed']);
  });

  it('open subscriptions per instance are bounded; a closed one frees its place', async () => {
    const runner: A2aSkillRunner = { run: async () => ({ data: {}, text: 'x', name: 'r', description: 'r' }) };
    const a = createA2aService({ db: app.obs.db, now: () => new Date() }, runner, { pollMs: 20, maxSubscriptions: 1 });
    const asked = await a.send({ kind: 'message', role: 'user', messageId: 'c1', parts: [{ kind: 'text', text: 'preflight' }] });
    const controller = new AbortController();
    const first = (await a.subscribe(asked.id, { signal: controller.signal }))[Symbol.asyncIterator]();
    expect((await first.next()).value).toMatchObject({ kind: 'task' });
    await expect(a.subscribe(asked.id)).rejects.toMatchObject({ kind: 'unsupported_operation', message: expect.stringMatching(/open subscriptions/) });
    controller.abort();
    expect((await first.next()).done).toBe(true);
    const again = (await a.subscribe(asked.id, { signal: AbortSignal.abort() }))[Symbol.asyncIterator]();
    expect((await again.next()).value).toMatchObject({ kind: 'task' });
    await again.return?.(undefined);
  });

  it('one client network holds at most its share of the open subscriptions, also when it asks for many at once', async () => {
    // A subscription to a task waiting for input lasts subscribeMaxMs (5 minutes): before the share,
    // one network (16 connections of 100 HTTP/2 streams each) could hold all 200 of an instance.
    const runner: A2aSkillRunner = { run: async () => ({ data: {}, text: 'x', name: 'r', description: 'r' }) };
    const a = createA2aService({ db: app.obs.db, now: () => new Date() }, runner, { pollMs: 20, maxSubscriptions: 16 });
    expect(subscriptionsPerClient(16)).toBe(2);
    expect(subscriptionsPerClient(A2A_LIMITS.maxSubscriptions)).toBe(25);
    const asked = await a.send({ kind: 'message', role: 'user', messageId: 'share-1', parts: [{ kind: 'text', text: 'preflight' }] });
    expect(asked.status.state).toBe('input-required');
    const controller = new AbortController();
    const open = async (client: string) => {
      const it = (await a.subscribe(asked.id, { signal: controller.signal, client }))[Symbol.asyncIterator]();
      expect((await it.next()).value).toMatchObject({ kind: 'task' });
      return it;
    };
    const held = [await open('203.0.113.9'), await open('203.0.113.9')];
    await expect(a.subscribe(asked.id, { client: '203.0.113.9' })).rejects.toMatchObject({ kind: 'unsupported_operation', message: expect.stringMatching(/this client network holds 2 open subscriptions/) });
    // Another network still gets its own.
    held.push(await open('198.51.100.9'));
    // Four asked at once from a third network: all pass the first check, two start, two are refused as they start.
    const asked4 = await Promise.all(Array.from({ length: 4 }, () => a.subscribe(asked.id, { signal: controller.signal, client: '192.0.2.9' })));
    const firsts = await Promise.allSettled(asked4.map((s) => s[Symbol.asyncIterator]().next()));
    expect(firsts.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    expect(firsts.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason.message))).toEqual([
      expect.stringMatching(/this client network holds 2 open subscriptions/),
      expect.stringMatching(/this client network holds 2 open subscriptions/),
    ]);
    controller.abort();
    for (const it of held) expect((await it.next()).done).toBe(true);
  });
});

describe('bodies nested deeper than anything reads safely', () => {
  it(`a body nesting deeper than ${MAX_JSON_DEPTH} levels is an Invalid Request on both versions (5,000 levels of metadata answered Internal error)`, async () => {
    const nest = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
    const body = (n: number, v1: boolean) =>
      v1
        ? `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"trust score for ${SERVER}"}],"messageId":"d1","metadata":${nest(n)}}}}`
        : `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"trust score for ${SERVER}"}],"messageId":"d0","kind":"message","metadata":${nest(n)}}}}`;
    for (const v1 of [false, true]) {
      for (const n of [100, 5000]) {
        const res = await fetch(`${app.base}/a2a`, { method: 'POST', headers: { 'content-type': 'application/json', ...(v1 ? V1 : {}) }, body: body(n, v1) });
        expect(((await res.json()) as { error?: unknown }).error, `${v1 ? '1.0' : '0.3'} at ${n}`).toEqual({ code: -32600, message: `Invalid Request: the body nests deeper than ${MAX_JSON_DEPTH} levels` });
      }
      // Metadata a few levels deep is no problem.
      const ok = await fetch(`${app.base}/a2a`, { method: 'POST', headers: { 'content-type': 'application/json', ...(v1 ? V1 : {}) }, body: body(5, v1) });
      expect(((await ok.json()) as { error?: unknown }).error).toBeUndefined();
    }
  });
});
