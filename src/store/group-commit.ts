// Group commit: many concurrent callers share one database write.
//
// Each caller hands its items to `submit` and gets a promise that settles only after the write
// that carried them committed (or failed). While a write is in flight, new items queue up; when
// it finishes, everything queued (up to `maxItems`) goes out as the next write. Under light load
// a single item is written at once (no added latency); under heavy load batches grow by
// themselves to what arrives during one write, so throughput scales with the batch size and not
// with the number of round trips. Nothing is acknowledged before it is durable.

export interface GroupCommitOptions<T> {
  /** Writes one batch; must be atomic (one transaction): it commits all items or none. */
  write(items: T[]): Promise<void>;
  /** Largest batch written at once (default 1000). */
  maxItems?: number;
  /** Writes allowed in flight at the same time (default 1). */
  concurrency?: number;
  /** Called with each committed batch's size (metrics). */
  onBatch?(size: number): void;
  /**
   * Decides whether a failed batch of several items is retried item by item, so that one item
   * the database rejects (a constraint, a bad value) does not fail its neighbours. Connection
   * errors should answer false: retrying cannot help and every caller must learn of the failure.
   */
  isolateOnError?(err: unknown): boolean;
}

interface Pending<T> {
  items: T[];
  resolve(): void;
  reject(err: unknown): void;
}

export interface GroupCommit<T> {
  /** Resolves after every item is committed; rejects with the write's error otherwise. */
  submit(items: T[]): Promise<void>;
  /** Resolves when nothing is queued or in flight. */
  drain(): Promise<void>;
}

export function groupCommit<T>(opts: GroupCommitOptions<T>): GroupCommit<T> {
  const maxItems = opts.maxItems ?? 1000;
  const concurrency = opts.concurrency ?? 1;
  const queue: Pending<T>[] = [];
  let inFlight = 0;
  let idle: (() => void)[] = [];
  let scheduled = false;

  async function writeBatch(batch: Pending<T>[]): Promise<void> {
    const items = batch.length === 1 ? batch[0]!.items : batch.flatMap((p) => p.items);
    try {
      await opts.write(items);
      opts.onBatch?.(items.length);
      for (const p of batch) p.resolve();
    } catch (err) {
      if (batch.length > 1 && opts.isolateOnError?.(err)) {
        // Each caller's items alone: the bad one fails, the others commit.
        for (const p of batch) {
          try {
            await opts.write(p.items);
            opts.onBatch?.(p.items.length);
            p.resolve();
          } catch (e) {
            p.reject(e);
          }
        }
      } else {
        for (const p of batch) p.reject(err);
      }
    }
  }

  // A write starts on setImmediate, after the current I/O phase: every request the event loop
  // already read in this turn joins the batch (matters for PGlite, whose queries run on this
  // thread), at the cost of one loop turn of latency.
  function schedule(): void {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      pump();
    });
  }

  function pump(): void {
    while (inFlight < concurrency && queue.length > 0) {
      const batch: Pending<T>[] = [];
      let n = 0;
      // A caller's items are never split across writes; one oversized caller goes out alone.
      while (queue.length > 0 && (batch.length === 0 || n + queue[0]!.items.length <= maxItems)) {
        const p = queue.shift()!;
        n += p.items.length;
        batch.push(p);
      }
      inFlight++;
      void writeBatch(batch).finally(() => {
        inFlight--;
        schedule();
      });
    }
    if (inFlight === 0 && queue.length === 0 && idle.length > 0) {
      const waiters = idle;
      idle = [];
      for (const w of waiters) w();
    }
  }

  return {
    submit(items) {
      if (items.length === 0) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        queue.push({ items, resolve, reject });
        schedule();
      });
    },
    drain() {
      if (inFlight === 0 && queue.length === 0) return Promise.resolve();
      return new Promise((r) => idle.push(r));
    },
  };
}
