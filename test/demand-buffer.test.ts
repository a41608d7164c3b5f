// The in-memory demand buffer (src/store/demand.ts): written every DEMAND_FLUSH_MS, and at once
// (after the current event-loop turn) when DEMAND_WRITE_ROWS rows wait, so that no single write
// builds a huge statement on the event loop. A recording Queryable stands in for the database.
import { describe, expect, it } from 'vitest';
import { demandBuffer, DEMAND_WRITE_ROWS, type DemandRow } from '../src/store/demand.js';
import type { Queryable } from '../src/db/index.js';

function recorder(fail = false) {
  const writes: number[] = [];
  const q = {
    async query(_sql: string, params?: unknown[]) {
      writes.push((params?.[0] as unknown[]).length);
      if (fail) throw new Error('database down');
      return [];
    },
  } as unknown as Queryable;
  return { q, writes };
}

const row = (i: number): DemandRow => ({ checked_at: new Date(0), target: `t${i}`, server_url: null, name: null, verdict: 'UNRATED', kind: 'preflight', receipt_id: `r${i}` });
const turn = () => new Promise((r) => setImmediate(r));

describe('demand buffer', () => {
  it('writes a full buffer after the current turn instead of waiting for the periodic write', async () => {
    const { q, writes } = recorder();
    const b = demandBuffer(q);
    for (let i = 0; i < DEMAND_WRITE_ROWS - 1; i++) b.add(row(i));
    await turn();
    expect(writes).toEqual([]);
    b.add(row(DEMAND_WRITE_ROWS));
    b.add(row(DEMAND_WRITE_ROWS + 1));
    expect(writes).toEqual([]);
    await turn();
    expect(writes).toEqual([DEMAND_WRITE_ROWS + 1]);
    b.add(row(0));
    await b.close();
    expect(writes).toEqual([DEMAND_WRITE_ROWS + 1, 1]);
  });

  it('does not write once per added row while the database refuses: only the periodic write retries', async () => {
    const { q, writes } = recorder(true);
    const errors: unknown[] = [];
    const b = demandBuffer(q, (e) => errors.push(e));
    for (let i = 0; i < DEMAND_WRITE_ROWS; i++) b.add(row(i));
    await turn();
    await turn();
    expect(writes).toEqual([DEMAND_WRITE_ROWS]);
    expect(errors).toHaveLength(1);
    for (let i = 0; i < 3 * DEMAND_WRITE_ROWS; i++) b.add(row(i));
    await turn();
    await turn();
    // The rows are kept (bounded) for the periodic retry; no new write was started per row.
    expect(writes).toEqual([DEMAND_WRITE_ROWS]);
    await expect(b.flush()).rejects.toThrow('database down');
    expect(writes[1]).toBe(4 * DEMAND_WRITE_ROWS);
    await b.close().catch(() => {});
  });
});
