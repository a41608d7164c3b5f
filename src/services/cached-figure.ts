// Figures over the whole index (stats counts, anomalies, trust delta, coverage demand), computed
// at most once per `freshMs` and shared (issue 23): at 100,000 servers or with a large demand
// table each of them costs tens to hundreds of milliseconds, and every page reading it per
// request made each page pay them all. The rules are those of the ranked list
// (trust-engine.ts `index`):
//
// - a figure younger than `freshMs` (service clock and monotonic time both) is served from memory;
// - concurrent misses share one computation;
// - a figure only past `freshMs` (nothing invalidated it) is still served, up to `staleMs` old,
//   while one computation refreshes it in the background (stale-while-revalidate);
// - `touch()` (evidence committed: by this process, or announced by another instance) does not
//   drop anything: a figure whose computation began before the last touch is still served until
//   AGGREGATE_SETTLE_MS after that beginning, and then recomputed before the next read is
//   answered. Under continuous writes each figure is therefore recomputed at most once per
//   AGGREGATE_SETTLE_MS instead of once per read after every report (issue 22's mixed load),
//   and a figure shows a write committed here at most AGGREGATE_SETTLE_MS (plus one computation)
//   after it; the written server's own score is read-your-writes (trust-engine.ts);
// - `invalidate()` drops every figure at once, and a computation that started before it is never
//   kept (drift recorded, which changes flags rather than counts).
//
// Entries are kept in BoundedMaps (CACHE_MAX_ENTRIES, src/store/cache-limits.ts).
import { BoundedMap } from '../store/cache-limits.js';

/**
 * How long a whole-index figure (category baseline, ranked list, counts, stats, demand) computed
 * before evidence was committed is still served: the bound within which such a figure shows a
 * write committed here (or announced by another instance), and the least time between two
 * computations of one figure while writes keep coming.
 */
export const AGGREGATE_SETTLE_MS = 500;

export interface CachedFigureOptions {
  /** Served from memory without a refresh this long. */
  freshMs: number;
  /** Served while one refresh runs until this old (>= freshMs; default freshMs: no stale serving). */
  staleMs?: number;
  /** After a touch(), a figure begun before it is served until this long after its beginning (default AGGREGATE_SETTLE_MS). */
  settleMs?: number;
}

export interface CachedFigures<V> {
  /**
   * The figure of `key` as of about `at` (within freshMs, or staleMs while refreshing). With
   * `notBefore` (a performance.now() time), only a figure whose computation began after it is
   * taken: a caller that has just committed something the figure must show (read-your-writes).
   */
  get(key: string, at: Date, notBefore?: number): Promise<V>;
  /** New evidence: figures begun before now are recomputed once they are settleMs old. */
  touch(): void;
  /** Drops every figure; computations in flight are not kept. */
  invalidate(): void;
}

export function cachedFigures<V>(compute: (key: string, at: Date) => Promise<V>, o: CachedFigureOptions): CachedFigures<V> {
  const freshMs = o.freshMs;
  const staleMs = Math.max(freshMs, o.staleMs ?? freshMs);
  const settleMs = o.settleMs ?? AGGREGATE_SETTLE_MS;
  // `start`: monotonic time the computation began (what a touch is compared with).
  const memo = new BoundedMap<string, { value: V; at: number; mono: number; start: number }>();
  const pending = new BoundedMap<string, { gen: number; at: number; start: number; p: Promise<V> }>();
  let gen = 0;
  let touched = -Infinity;

  const young = (e: { at: number; mono: number }, at: Date, bound: number) => {
    const age = at.getTime() - e.at;
    return age >= 0 && age < bound && performance.now() - e.mono < bound;
  };
  /** Begun after the last touch (strictly: one begun at the same instant may have read before the write), or not yet settleMs old. */
  const settled = (start: number) => start > touched || performance.now() - start < settleMs;

  return {
    get(key, at, notBefore = -Infinity) {
      const hit = memo.get(key);
      const usable = hit !== undefined && hit.start > notBefore && settled(hit.start);
      if (usable && young(hit, at, freshMs)) return Promise.resolve(hit.value);
      const servable = usable && young(hit, at, staleMs);
      const inflight = pending.get(key);
      if (inflight && inflight.gen === gen && inflight.start > notBefore && settled(inflight.start) && Math.abs(inflight.at - at.getTime()) < freshMs) return servable ? Promise.resolve(hit.value) : inflight.p;
      const g = gen;
      const start = performance.now();
      const p = compute(key, at)
        .then((value) => {
          // A computation that began before the kept one (outrun by a read that needed a newer figure) is not kept.
          if (g === gen && !((memo.get(key)?.start ?? -Infinity) > start)) memo.set(key, { value, at: at.getTime(), mono: performance.now(), start });
          return value;
        })
        .finally(() => {
          if (pending.get(key)?.p === p) pending.delete(key);
        });
      pending.set(key, { gen: g, at: at.getTime(), start, p });
      if (servable) {
        // Refreshed in the background; a failure leaves the figure to the next read.
        p.catch(() => {});
        return Promise.resolve(hit.value);
      }
      return p;
    },
    touch() {
      touched = performance.now();
    },
    invalidate() {
      gen++;
      memo.clear();
      pending.clear();
    },
  };
}
