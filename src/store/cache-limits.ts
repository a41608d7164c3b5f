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

/** A Map holding at most cacheLimits().maxEntries entries (or `max`, when given): the oldest go first. */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(private readonly max?: () => number) {
    super();
  }

  get limit(): number {
    return this.max ? this.max() : limits.maxEntries;
  }

  override set(key: K, value: V): this {
    if (super.has(key)) super.delete(key);
    else {
      const limit = this.limit;
      while (this.size >= limit) {
        const oldest = this.keys().next();
        if (oldest.done) break;
        super.delete(oldest.value);
      }
    }
    return super.set(key, value);
  }
}
