// The in-memory demand buffer (src/store/demand.ts): written every DEMAND_FLUSH_MS, and at once
// (after the current event-loop turn) when DEMAND_WRITE_ROWS rows wait, so that no single write
// builds a huge statement on the event loop. A recording Queryable stands in for the database.
import { describe, expect, it } from 'vitest';
import { demandBuffer, DEMAND_WRITE_ROWS, type DemandRow } from '../src/store/demand.js';
import type { Queryable } from '../src/db/index.js';

function recorder(fail = false) {
  const writes: number[] = [];
  const params: unknown[][][] = [];
  const q = {
    async query(_sql: string, p?: unknown[][]) {
      writes.push((p?.[0] as unknown[]).length);
      params.push(p!);
      if (fail) throw new Error('database down');
      return [];
    },
  } as unknown as Queryable;
  return { q, writes, params };
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
    for (let i = DEMAND_WRITE_ROWS; i < 4 * DEMAND_WRITE_ROWS; i++) b.add(row(i));
    await turn();
    await turn();
    // The rows are kept (bounded) for the periodic retry; no new write was started per row.
    expect(writes).toEqual([DEMAND_WRITE_ROWS]);
    await expect(b.flush()).rejects.toThrow('database down');
    expect(writes[1]).toBe(4 * DEMAND_WRITE_ROWS);
    await b.close().catch(() => {});
  });

  it('writes identical checks as one row counting them, dated by the last; different claims stay apart', async () => {
    const { q, writes, params } = recorder();
    const b = demandBuffer(q);
    const at = (ms: number) => new Date(Date.UTC(2026, 10, 27, 0, 0, 0, ms));
    for (let i = 0; i < 5; i++) b.add({ ...row(1), checked_at: at(900 - i * 100) }); // the latest first
    b.add({ ...row(1), kind: 'gateway', checked_at: at(0) }); // same receipt, another kind
    b.add({ ...row(1), server_url: 'https://s.example/mcp', checked_at: at(0) });
    b.add({ ...row(2), checked_at: at(50) });
    b.add({ ...row(2), checked_at: at(60) });
    b.add({ ...row(1), name: null, receipt_id: null, checked_at: at(0) });
    b.add({ ...row(1), receipt_id: null, checked_at: at(1) });
    await b.flush();
    expect(writes).toEqual([5]);
    const [times, targets, urls, , , kinds, receipts, checks] = params[0]!;
    const got = (targets as string[]).map((t, i) => [t, urls![i], kinds![i], receipts![i], checks![i], times![i]]);
    expect(got).toEqual([
      ['t1', null, 'preflight', 'r1', 5, at(900).toISOString()],
      ['t1', null, 'gateway', 'r1', 1, at(0).toISOString()],
      ['t1', 'https://s.example/mcp', 'preflight', 'r1', 1, at(0).toISOString()],
      ['t2', null, 'preflight', 'r2', 2, at(60).toISOString()],
      ['t1', null, 'preflight', null, 2, at(1).toISOString()],
    ]);
    // Counted afresh after a write.
    b.add(row(1));
    await b.close();
    expect(params[1]![7]).toEqual([1]);
  });

  it('keeps the counts of a refused write and adds the checks counted meanwhile to them', async () => {
    let fail = true;
    const writes: unknown[][][] = [];
    const q = {
      async query(_sql: string, p: unknown[][]) {
        writes.push(p);
        if (fail) throw new Error('database down');
        return [];
      },
    } as unknown as Queryable;
    const b = demandBuffer(q, () => {});
    b.add(row(1));
    b.add(row(1));
    await expect(b.flush()).rejects.toThrow('database down');
    b.add(row(1));
    b.add(row(2));
    fail = false;
    await b.close();
    expect(writes[1]![1]).toEqual(['t1', 't2']);
    expect(writes[1]![7]).toEqual([3, 1]);
  });
});
