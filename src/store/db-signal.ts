// In-process notifications per database handle: a write through a handle tells every cache kept
// for that handle in this process (several services, or several test instances, may share one).
// Listeners of other handles never hear it; what other processes wrote is their caches' bound (or
// the evidence bus) to learn.

export interface DbSignal<A extends unknown[]> {
  /** Calls `fn` on every emit through `db`; returns the unsubscribe. */
  on(db: object, fn: (...args: A) => void): () => void;
  emit(db: object, ...args: A): void;
}

export function dbSignal<A extends unknown[] = []>(): DbSignal<A> {
  const listeners = new WeakMap<object, Set<(...args: A) => void>>();
  return {
    on(db, fn) {
      let set = listeners.get(db);
      if (!set) listeners.set(db, (set = new Set()));
      set.add(fn);
      return () => set.delete(fn);
    },
    emit(db, ...args) {
      const set = listeners.get(db);
      if (!set) return;
      for (const fn of set) fn(...args);
    },
  };
}
