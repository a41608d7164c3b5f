// src/store/per-turn.ts: the keys asked of one database handle in one event-loop turn are read
// by one call, each caller answered with its own key's value.
import { describe, expect, it } from 'vitest';
import type { Queryable } from '../src/db/index.js';
import { perTurn, PER_TURN_MAX_KEYS } from '../src/store/per-turn.js';

const handle = (): Queryable => ({ query: async () => [] });

function reader() {
  const calls: { db: Queryable; keys: number[] }[] = [];
  const read = perTurn(async (db: Queryable, keys: number[]) => {
    calls.push({ db, keys });
    return new Map(keys.filter((k) => k % 2 === 0).map((k) => [k, `v${k}`]));
  });
  return { calls, read };
}

describe('perTurn', () => {
  it('reads the keys of one turn once, a repeated key once, and answers each caller with its value or undefined', async () => {
    const { calls, read } = reader();
    const db = handle();
    expect(await Promise.all([read(db, 2), read(db, 3), read(db, 2), read(db, 4)])).toEqual(['v2', undefined, 'v2', 'v4']);
    expect(calls.map((c) => c.keys)).toEqual([[2, 3, 4]]);
  });

  it('a later turn starts a new read; each database handle has its own', async () => {
    const { calls, read } = reader();
    const a = handle();
    const b = handle();
    const first = Promise.all([read(a, 2), read(b, 4)]);
    await first;
    await read(a, 6);
    expect(calls.map((c) => [c.db === a ? 'a' : 'b', c.keys])).toEqual([['a', [2]], ['b', [4]], ['a', [6]]]);
  });

  it(`a turn of more than ${PER_TURN_MAX_KEYS} keys is read in statements of at most ${PER_TURN_MAX_KEYS}`, async () => {
    const { calls, read } = reader();
    const db = handle();
    const keys = Array.from({ length: PER_TURN_MAX_KEYS * 2 + 1 }, (_, i) => i);
    const values = await Promise.all(keys.map((k) => read(db, k)));
    expect(values).toEqual(keys.map((k) => (k % 2 === 0 ? `v${k}` : undefined)));
    expect(calls.map((c) => c.keys.length)).toEqual([PER_TURN_MAX_KEYS, PER_TURN_MAX_KEYS, 1]);
  });

  it('a failed read fails every caller of its turn, and the next turn reads again', async () => {
    let fail = true;
    const read = perTurn(async (_db: Queryable, keys: number[]) => {
      if (fail) throw new Error('database gone');
      return new Map(keys.map((k) => [k, k]));
    });
    const db = handle();
    const results = await Promise.allSettled([read(db, 1), read(db, 2)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    fail = false;
    expect(await read(db, 1)).toBe(1);
  });
});

describe('perTurn with text keys PostgreSQL cannot store', () => {
  it('a key with NUL is answered none without being sent, so it cannot fail the statement of the other keys of its turn', async () => {
    const sent: string[][] = [];
    const read = perTurn(async (_db: Queryable, keys: string[]) => {
      sent.push(keys);
      return new Map(keys.map((k) => [k, k.toUpperCase()]));
    });
    const db = handle();
    expect(await Promise.all([read(db, 'a'), read(db, 'b\u0000'), read(db, 'c')])).toEqual(['A', undefined, 'C']);
    expect(sent).toEqual([['a', 'c']]);
  });
});
