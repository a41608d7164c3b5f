import { describe, expect, it } from 'vitest';
import { json, postJson, startTestApp } from './support/app.js';
import { backend } from './support/db.js';

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
