import { describe, expect, it } from 'vitest';
import { json, postJson, startTestApp } from './support/app.js';
import { backend } from './support/db.js';
import { A2A_ANSWER_BYTES, JSONRPC_RATE_LIMITED } from '../src/agents/rate-limit.js';

// A2A_TASK_RETENTION_DAYS: every message/send stores a task, from anyone; before this job the
// table kept every one for good. A task whose status has not changed for the retention is
// deleted by a periodic job (once per period across instances); tasks/get then answers
// TaskNotFound, as for any unknown id.

const DAY = 86_400_000;

describe(`A2A task retention (${backend})`, () => {
  it('deletes tasks idle for A2A_TASK_RETENTION_DAYS, keeps younger ones, and 0 keeps every task', async () => {
    // The service clock, not the wall clock: tasks are stamped with the clock the job reads.
    let clock = Date.parse('2026-10-01T00:00:00.000Z');
    const app = await startTestApp({ A2A_TASK_RETENTION_DAYS: '7' }, { now: () => new Date(clock) });
    const send = async (text: string) =>
      (await json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text }], messageId: crypto.randomUUID(), kind: 'message' } } })))
        .result as { id: string; status: { timestamp: string } };
    const get = (id: string) => json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 2, method: 'tasks/get', params: { id } }));
    try {
      const old = await send('hello');
      expect(old.status.timestamp).toBe(new Date(clock).toISOString());
      clock += 5 * DAY;
      const young = await send('hello again');
      // 8 days later the old task is 8 days idle, the young one 3.
      clock += 3 * DAY;
      expect(await app.obs.services.a2aTaskRetention.job.tick(new Date(clock))).toBe(true);
      expect(await get(old.id)).toMatchObject({ error: { code: -32001 } });
      expect(await get(young.id)).toMatchObject({ result: { id: young.id } });
    } finally {
      await app.close();
    }
    const keep = await startTestApp({ A2A_TASK_RETENTION_DAYS: '0' });
    try {
      await postJson(`${keep.base}/a2a`, { jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: 'hi' }], messageId: 'k1', kind: 'message' } } });
      expect(await keep.obs.services.a2aTaskRetention.purge(new Date(Date.now() + 400 * DAY))).toBe(0);
      expect((await keep.obs.db.query('SELECT 1 FROM a2a_tasks')).length).toBe(1);
    } finally {
      await keep.close();
    }
  }, 60_000);
});

// A2A_TASK_BYTES_PER_CLIENT_PER_DAY: a message may carry up to BODY_LIMIT of data parts and
// metadata, all kept in its task's history, and the skills rate limit counts calls, not bytes:
// before this allowance one client network could make an instance store 300 tasks of 64 KiB a
// minute (27 GiB a day, kept for A2A_TASK_RETENTION_DAYS).
describe(`A2A task storage per client network (${backend})`, () => {
  it('counts what each skill invocation stores and refuses beyond the daily allowance, like a rate limit', async () => {
    const ALLOWANCE = 300_000;
    const app = await startTestApp({ TRUST_PROXY: '1', A2A_TASK_BYTES_PER_CLIENT_PER_DAY: String(ALLOWANCE) });
    const from = (ip: string) => ({ 'x-forwarded-for': ip });
    const message = (text: string, extra: Record<string, unknown> = {}) => ({
      jsonrpc: '2.0',
      id: 1,
      method: 'message/send',
      params: { message: { role: 'user', parts: [{ kind: 'text', text }], messageId: crypto.randomUUID(), kind: 'message', ...extra } },
    });
    const stored = async (id: string) => Number((await app.obs.db.query<{ n: string }>('SELECT octet_length(task::text) AS n FROM a2a_tasks WHERE id = $1', [id]))[0]!.n);
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: 'https://stored.example.com/mcp', success: true, latency_ms: 40 })).status).toBe(200);
      // An ordinary task is counted as at least what it stores.
      const plain = message('trust score for https://stored.example.com/mcp');
      const ok = await postJson(`${app.base}/a2a`, plain, from('198.51.100.20'));
      expect(ok.status).toBe(200);
      const task = (await json(ok)).result as { id: string; status: { state: string } };
      expect(task.status.state).toBe('completed');
      expect(await stored(task.id)).toBeLessThanOrEqual(Buffer.byteLength(JSON.stringify(plain.params)) + A2A_ANSWER_BYTES);

      // A client stuffing 60 KB of data into each message: four fit, the fifth is refused.
      const heavy = () => message('trust score for https://stored.example.com/mcp', { metadata: { junk: 'j'.repeat(60_000) } });
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        const r = await postJson(`${app.base}/a2a`, heavy(), from('198.51.100.21'));
        expect(r.status).toBe(200);
        ids.push(((await json(r)).result as { id: string }).id);
      }
      const refused = await postJson(`${app.base}/a2a`, heavy(), from('198.51.100.21'));
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(refused.headers.get('ratelimit-policy')).toBe(`"a2a_task_bytes";q=${ALLOWANCE};w=86400`);
      expect(await json(refused)).toMatchObject({
        error: { code: JSONRPC_RATE_LIMITED, message: expect.stringMatching(/at most 300000 bytes of A2A tasks stored .* per day/), data: { policy: 'a2a_task_bytes', limit: ALLOWANCE, window_seconds: 86_400 } },
      });
      // What the client made us store stays within its allowance.
      let total = 0;
      for (const id of ids) total += await stored(id);
      expect(total).toBeLessThanOrEqual(ALLOWANCE);
      // An ordinary message from that network still fits what is left; other networks are untouched.
      expect((await postJson(`${app.base}/a2a`, message('trust score for https://stored.example.com/mcp'), from('198.51.100.21'))).status).toBe(200);
      expect((await postJson(`${app.base}/a2a`, heavy(), from('198.51.100.22'))).status).toBe(200);
    } finally {
      await app.close();
    }
  }, 60_000);
});
