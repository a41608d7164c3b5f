import { createServer } from 'node:net';
import { ClientFactory } from '@a2a-js/sdk/client';
import type { Task } from '@a2a-js/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';

// /a2a: JSON-RPC 2.0 exactly (the spec's section 7 examples), A2A 0.3 message/send and
// tasks/get, and the stock @a2a-js/sdk client driven from the agent card.

let app: TestApp;
const SERVER = 'https://finance.example.com/mcp';

/** A free loopback port, so PUBLIC_BASE_URL (and with it the agent card's url) is the real address. */
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
});
afterAll(async () => app?.close());

const rpc = (body: unknown) => postJson(`${app.base}/a2a`, body);
const raw = (body: string) => fetch(`${app.base}/a2a`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
const send = (text: string, id: unknown = 1) =>
  rpc({ jsonrpc: '2.0', id, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text }], messageId: `m-${Math.random()}`, kind: 'message' } } });

describe('JSON-RPC 2.0 section 7 examples (with this service\'s methods)', () => {
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
      ]),
    );
    expect(r.map((x: { id: unknown }) => x.id)).toEqual(['1', '2', null, '5', '9']);
    expect(r[0].error.code).toBe(-32001);
    expect(r[1].result.kind).toBe('task');
    expect(r[2].error.code).toBe(-32600);
    expect(r[3].error.code).toBe(-32601);
    expect(r[4].error.code).toBe(-32602);
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

  it('-32602 for bad params', async () => {
    const bad = [
      { message: 'hi' },
      { message: { role: 'user', parts: [], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for x' }] } },
      { message: { role: 'agent', parts: [{ kind: 'text', text: 'trust score for x' }], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'data', data: {} }], messageId: 'x' } },
      { message: { role: 'user', parts: [{ kind: 'text', text: 'x'.repeat(5000) }], messageId: 'x' } },
    ];
    for (const params of bad) expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'message/send', params }))).error.code, JSON.stringify(params).slice(0, 80)).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: {} }))).error.code).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'x', historyLength: -1 } }))).error.code).toBe(-32602);
    expect((await json(rpc({ jsonrpc: '2.0', id: 1, method: 'message/send', params: [1, 2] }))).error.code).toBe(-32602);
  });

  it('-32001 for an unknown task', async () => {
    expect(await json(rpc({ jsonrpc: '2.0', id: 'q', method: 'tasks/get', params: { id: '00000000-0000-0000-0000-000000000000' } }))).toMatchObject({ id: 'q', error: { code: -32001 } });
  });
});

describe('message/send and tasks/get', () => {
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
    expect(task.history[0]).toMatchObject({ role: 'user', taskId: task.id, contextId: task.contextId });

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

  it('a message to an existing (terminal) task is refused; to an unknown task is -32001', async () => {
    const t = (await json(send(`trust score for ${SERVER}`))).result;
    const msg = (taskId: string) => ({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for x' }], messageId: 'z', taskId, kind: 'message' } } });
    expect((await json(rpc(msg(t.id)))).error.code).toBe(-32004);
    expect((await json(rpc(msg('missing')))).error.code).toBe(-32001);
  });

  it('GET /a2a is the descriptor with the methods and the card\'s skills', async () => {
    const d = await json(fetch(`${app.base}/a2a`));
    const card = await json(fetch(`${app.base}/.well-known/agent-card.json`));
    expect(d.methods.map((m: { name: string }) => m.name)).toEqual(['message/send', 'tasks/get']);
    expect(d.skills).toEqual(card.skills);
    expect(d.usage.request.method).toBe('message/send');
    // The usage example works as written.
    expect((await json(rpc(d.usage.request))).result.kind).toBe('task');
  });
});

describe('stock @a2a-js/sdk client', () => {
  it('discovers the card, sends a message and fetches the task', async () => {
    const client = await new ClientFactory().createFromUrl(app.base);
    const result = await client.sendMessage({
      message: { kind: 'message', role: 'user', messageId: crypto.randomUUID(), parts: [{ kind: 'text', text: `trust score for ${SERVER}` }] },
    });
    expect(result.kind).toBe('task');
    const task = result as Task;
    expect(task.status.state).toBe('completed');
    const fetched = await client.getTask({ id: task.id });
    expect(fetched.id).toBe(task.id);
    expect(fetched.artifacts?.[0]?.parts[0]).toMatchObject({ kind: 'data' });
  });
});
