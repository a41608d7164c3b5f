// The size bound of every in-memory cache (issue 23): CACHE_MAX_ENTRIES entries per cache, per
// process (README "Configuration"). Caches keyed by server, URL, client address, category or
// anything else a caller names are BoundedMaps: inserting into a full one drops its oldest entry
// (insertion order; an entry set again counts as new), so memory stays bounded however many
// servers are tracked or however many distinct keys requests carry. Process-wide: the service
// sets it from its configuration at start (createServices); the last setting wins.

export const DEFAULT_CACHE_MAX_ENTRIES = 20_000;

let limits = { maxEntries: DEFAULT_CACHE_MAX_ENTRIES };

export function cacheLimits(): Readonly<typeof limits> {
  return limits;
}

export function setCacheLimits(l: { maxEntries: number }): void {
  if (!Number.isInteger(l.maxEntries) || l.maxEntries < 1) throw new Error(`cache limit must be a positive integer, not ${l.maxEntries}`);
  limits = { maxEntries: l.maxEntries };
}

/**
 * A Map holding at most cacheLimits().maxEntries entries (or `max`, when given): the oldest go
 * first, each passed to `onEvict` when given.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(
    private readonly max?: () => number,
    private readonly onEvict?: (key: K, value: V) => void,
  ) {
    super();
  }

  get limit(): number {
    return this.max ? this.max() : limits.maxEntries;
  }

  override set(key: K, value: V): this {
    // Set again, an entry counts as new. The bound is applied on every set, so a limit lowered
    // at run time holds from the next set on.
    super.delete(key);
    const limit = this.limit;
    while (this.size >= limit) {
      const oldest = this.entries().next();
      if (oldest.done) break;
      super.delete(oldest.value[0]);
      this.onEvict?.(oldest.value[0], oldest.value[1]);
    }
    return super.set(key, value);
  }
}
