import { describe, expect, it } from 'vitest';
import { groupCommit } from '../src/store/group-commit.js';

// Group commit (src/store/group-commit.ts): callers resolve only after their batch's write
// resolved, concurrent callers share writes, a failed write rejects every caller it carried.
const tick = () => new Promise<void>((r) => setImmediate(r));

describe('group commit', () => {
  it('writes what arrived in one loop turn together and batches what arrives during a write', async () => {
    const writes: number[][] = [];
    const sizes: number[] = [];
    let release!: () => void;
    let first = true;
    const gc = groupCommit<number>({
      write: async (items) => {
        writes.push(items);
        if (first) {
          first = false;
          await new Promise<void>((r) => (release = r));
        }
      },
      onBatch: (n) => sizes.push(n),
    });
    const settled: number[] = [];
    const p1 = gc.submit([1]).then(() => settled.push(1));
    await tick();
    const rest = [2, 3, 4].map((i) => gc.submit([i]).then(() => settled.push(i)));
    await tick();
    expect(writes).toEqual([[1]]);
    expect(settled).toEqual([]); // nobody is acknowledged before the write finished
    release();
    await Promise.all([p1, ...rest]);
    expect(writes).toEqual([[1], [2, 3, 4]]);
    expect(sizes).toEqual([1, 3]);
    await gc.drain();
  });

  it('respects maxItems without splitting one caller', async () => {
    const writes: number[][] = [];
    const gc = groupCommit<number>({ write: async (items) => void writes.push(items), maxItems: 3 });
    await Promise.all([gc.submit([1]), gc.submit([2, 3]), gc.submit([4, 5]), gc.submit([6, 7, 8, 9])]);
    expect(writes).toEqual([[1, 2, 3], [4, 5], [6, 7, 8, 9]]);
  });

  it('rejects every caller of a failed batch when the error is not isolatable', async () => {
    let calls = 0;
    const gc = groupCommit<number>({
      write: async () => {
        calls++;
        if (calls > 1) throw new Error('connection lost');
      },
      isolateOnError: () => false,
    });
    const a = gc.submit([1]);
    await tick();
    const b = gc.submit([2]);
    const c = gc.submit([3]);
    await expect(a).resolves.toBeUndefined();
    await expect(b).rejects.toThrow('connection lost');
    await expect(c).rejects.toThrow('connection lost');
  });

  it('retries caller by caller so one bad item fails alone', async () => {
    const committed: number[] = [];
    let hold = true;
    let release!: () => void;
    const gc = groupCommit<number>({
      write: async (items) => {
        if (hold) {
          hold = false;
          await new Promise<void>((r) => (release = r));
        }
        if (items.includes(13)) throw new Error('bad row');
        committed.push(...items);
      },
      isolateOnError: () => true,
    });
    const first = gc.submit([0]);
    await tick();
    const results = Promise.allSettled([gc.submit([1]), gc.submit([13]), gc.submit([2])]);
    release();
    await first;
    const [r1, r13, r2] = await results;
    expect(r1.status).toBe('fulfilled');
    expect(r13.status).toBe('rejected');
    expect(r2.status).toBe('fulfilled');
    expect(committed.sort()).toEqual([0, 1, 2]);
  });
});
