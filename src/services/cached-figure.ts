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
// - `invalidate()` (evidence committed by this process) drops every figure at once, and a
//   computation that started before it is never kept: in one process a write followed by a read
//   still shows the write.
//
// Entries are kept in BoundedMaps (CACHE_MAX_ENTRIES, src/store/cache-limits.ts).
import { BoundedMap } from '../store/cache-limits.js';

export interface CachedFigureOptions {
  /** Served from memory without a refresh this long. */
  freshMs: number;
  /** Served while one refresh runs until this old (>= freshMs; default freshMs: no stale serving). */
  staleMs?: number;
}

export interface CachedFigures<V> {
  /** The figure of `key` as of about `at` (within freshMs, or staleMs while refreshing). */
  get(key: string, at: Date): Promise<V>;
  /** Drops every figure; computations in flight are not kept. */
  invalidate(): void;
}

export function cachedFigures<V>(compute: (key: string, at: Date) => Promise<V>, o: CachedFigureOptions): CachedFigures<V> {
  const freshMs = o.freshMs;
  const staleMs = Math.max(freshMs, o.staleMs ?? freshMs);
  const memo = new BoundedMap<string, { value: V; at: number; mono: number }>();
  const pending = new BoundedMap<string, { gen: number; at: number; p: Promise<V> }>();
  let gen = 0;

  const young = (e: { at: number; mono: number }, at: Date, bound: number) => {
    const age = at.getTime() - e.at;
    return age >= 0 && age < bound && performance.now() - e.mono < bound;
  };

  return {
    get(key, at) {
      const hit = memo.get(key);
      if (hit && young(hit, at, freshMs)) return Promise.resolve(hit.value);
      const servable = hit !== undefined && young(hit, at, staleMs);
      const inflight = pending.get(key);
      if (inflight && inflight.gen === gen && Math.abs(inflight.at - at.getTime()) < freshMs) return servable ? Promise.resolve(hit.value) : inflight.p;
      const g = gen;
      const p = compute(key, at)
        .then((value) => {
          if (g === gen) memo.set(key, { value, at: at.getTime(), mono: performance.now() });
          return value;
        })
        .finally(() => {
          if (pending.get(key)?.p === p) pending.delete(key);
        });
      pending.set(key, { gen: g, at: at.getTime(), p });
      if (servable) {
        // Refreshed in the background; a failure leaves the figure to the next read.
        p.catch(() => {});
        return Promise.resolve(hit.value);
      }
      return p;
    },
    invalidate() {
      gen++;
      memo.clear();
      pending.clear();
    },
  };
}
