import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AGGREGATE_SETTLE_MS, cachedFigures } from '../src/services/cached-figure.js';

// cached-figure.ts with a fake monotonic clock (performance.now) and fixed service times.
describe('cached whole-index figures', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'setImmediate'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const T0 = new Date('2026-11-26T12:00:00Z');
  const later = (ms: number) => new Date(T0.getTime() + ms);
  /** A figure whose computations wait until released (resolvers[i] ends the i-th); its value is the number of the computation. */
  function held() {
    let n = 0;
    const resolvers: (() => void)[] = [];
    const f = cachedFigures(
      () =>
        new Promise<number>((resolve) => {
          const v = ++n;
          resolvers.push(() => resolve(v));
        }),
      { freshMs: 2000 },
    );
    return { f, resolvers, computations: () => n };
  }
  /** A figure counting its computations; its value is the number of the computation. */
  function counted(opts = { freshMs: 2000, staleMs: 30_000 }) {
    let n = 0;
    const f = cachedFigures(async () => ++n, opts);
    return { f, computations: () => n };
  }

  it('serves a fresh figure from memory and shares one computation between concurrent misses', async () => {
    const { f, computations } = counted();
    expect(await Promise.all([f.get('k', T0), f.get('k', T0), f.get('k', T0)])).toEqual([1, 1, 1]);
    vi.advanceTimersByTime(1000);
    expect(await f.get('k', later(1000))).toBe(1);
    expect(computations()).toBe(1);
  });

  it('past freshMs serves the old figure while one refresh runs, and the refreshed one after it', async () => {
    const { f, computations } = counted();
    await f.get('k', T0);
    vi.advanceTimersByTime(2500);
    // Answered at once with the old figure; the refresh it started is what the next read gets.
    expect(await f.get('k', later(2500))).toBe(1);
    expect(computations()).toBe(2);
    expect(await f.get('k', later(2500))).toBe(2);
    expect(computations()).toBe(2);
  });

  it('after touch(): a figure begun before it is served until AGGREGATE_SETTLE_MS old, then recomputed before the read is answered', async () => {
    const { f, computations } = counted();
    expect(await f.get('k', T0)).toBe(1);
    vi.advanceTimersByTime(100);
    f.touch();
    // Still within the settle bound of its computation: no recomputation per write.
    expect(await f.get('k', later(100))).toBe(1);
    vi.advanceTimersByTime(AGGREGATE_SETTLE_MS - 101);
    expect(await f.get('k', later(AGGREGATE_SETTLE_MS - 1))).toBe(1);
    expect(computations()).toBe(1);
    // Past it: the read waits for a figure that shows the write (not the old one served stale).
    vi.advanceTimersByTime(1);
    expect(await f.get('k', later(AGGREGATE_SETTLE_MS))).toBe(2);
    // A figure begun after the last touch is fresh again for freshMs.
    vi.advanceTimersByTime(1500);
    expect(await f.get('k', later(AGGREGATE_SETTLE_MS + 1500))).toBe(2);
    expect(computations()).toBe(2);
  });

  it('under continuous writes a figure is computed at most once per AGGREGATE_SETTLE_MS, whatever the reads', async () => {
    const { f, computations } = counted();
    const steps = 100;
    const step = 10;
    for (let i = 0; i < steps; i++) {
      f.touch();
      await f.get('k', later(i * step));
      vi.advanceTimersByTime(step);
    }
    const elapsed = steps * step;
    expect(computations()).toBeGreaterThanOrEqual(Math.floor(elapsed / AGGREGATE_SETTLE_MS));
    expect(computations()).toBeLessThanOrEqual(Math.ceil(elapsed / AGGREGATE_SETTLE_MS) + 1);
  });

  it('a computation in flight when the touch came is shared only within the settle bound', async () => {
    const { f, resolvers, computations } = held();
    const first = f.get('k', T0);
    f.touch();
    const joined = f.get('k', T0);
    expect(computations()).toBe(1);
    vi.advanceTimersByTime(AGGREGATE_SETTLE_MS);
    const own = f.get('k', later(AGGREGATE_SETTLE_MS));
    expect(computations()).toBe(2);
    resolvers.forEach((r) => r());
    expect(await Promise.all([first, joined, own])).toEqual([1, 1, 2]);
  });

  it('invalidate() drops every figure at once and never keeps a computation begun before it', async () => {
    let n = 0;
    let release: () => void = () => {};
    const f = cachedFigures(
      () =>
        new Promise<number>((resolve) => {
          const v = ++n;
          release = () => resolve(v);
        }),
      { freshMs: 2000 },
    );
    const before = f.get('k', T0);
    f.invalidate();
    release();
    expect(await before).toBe(1);
    const after = f.get('k', T0);
    release();
    expect(await after).toBe(2);
    expect(await f.get('k', T0)).toBe(2);
  });
  it('with notBefore, takes only a figure begun after it; the older computation, ending last, is not kept', async () => {
    const { f, resolvers, computations } = held();
    // A read in flight, then a caller that has just written what the figure must show.
    const older = f.get('k', T0);
    vi.advanceTimersByTime(1);
    const written = performance.now();
    vi.advanceTimersByTime(1);
    const mine = f.get('k', later(2), written);
    expect(computations()).toBe(2);
    // A plain read after it shares the newer computation.
    const plain = f.get('k', later(2));
    expect(computations()).toBe(2);
    resolvers[1]!();
    expect(await mine).toBe(2);
    expect(await plain).toBe(2);
    // The older computation ends last: it answers its own caller but does not replace the newer figure.
    resolvers[0]!();
    expect(await older).toBe(1);
    expect(await f.get('k', later(3))).toBe(2);
    expect(await f.get('k', later(3), written)).toBe(2);
    expect(computations()).toBe(2);
  });
});
