// Group commit: many concurrent callers share one database write.
//
// Each caller hands its items to `submit` and gets a promise that settles only after the write
// that carried them committed (or failed). While a write is in flight, new items queue up; when
// it finishes, everything queued (up to `maxItems`) goes out as the next write. Under light load
// a single item is written at once (no added latency); under heavy load batches grow by
// themselves to what arrives during one write, so throughput scales with the batch size and not
// with the number of round trips. Nothing is acknowledged before it is durable.
//
// The queue is bounded (docs/reliability.md "A database that holds or stops answering"): at most
// `maxQueuedItems` items wait for a write (beyond, a submission is refused at once), an item
// waits at most `maxWaitMs` for its write to begin (then it is refused), and an item whose caller
// went away before its write began is dropped, never written. A refused or dropped item was not
// stored: a retry is correct and creates no duplicate. Once its write has begun an item stays in
// it: it may commit after its caller left (a 200 means committed; no answer means unknown).
import { ObservatoryError } from '../errors.js';

/** Whether the caller still waits for the answer: an AbortSignal (Connect's ctx.signal) or a REST request's view of its response. */
export interface CallerGone {
  readonly aborted: boolean;
}

/** Items waiting for a write beyond this many times maxItems are refused (unless nothing is queued). */
export const QUEUED_BATCHES = 8;
/** Longest an item waits for its write to begin before it is refused. */
export const MAX_QUEUE_WAIT_MS = 5_000;
/** The Retry-After of a refusal (s): what a database answer takes to come back under a burst. */
const RETRY_AFTER_S = '2';

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
  /** Items waiting for a write (not yet in one) beyond which a submission is refused at once (default QUEUED_BATCHES × maxItems). */
  maxQueuedItems?: number;
  /** Longest an item waits for its write to begin (default MAX_QUEUE_WAIT_MS); past it, it is refused. */
  maxWaitMs?: number;
  /** What one item is, in refusals ("report", "receipt"). */
  what?: string;
  /** Monotonic clock in ms (tests). */
  now?(): number;
}

interface Pending<T> {
  items: T[];
  resolve(): void;
  reject(err: unknown): void;
  /** When it was queued (opts.now). */
  at: number;
  gone: CallerGone | undefined;
}

export interface GroupCommit<T> {
  /**
   * Resolves after every item is committed; rejects with the write's error otherwise, or with a
   * 503 `unavailable` ObservatoryError (Retry-After) when the queue is full, the items waited
   * too long for their write, or `gone` said the caller left before their write began (nothing
   * of theirs was written).
   */
  submit(items: T[], gone?: CallerGone): Promise<void>;
  /** Items waiting for a write now (metrics, tests). */
  queued(): number;
  /** Resolves when nothing is queued or in flight. */
  drain(): Promise<void>;
}

export function groupCommit<T>(opts: GroupCommitOptions<T>): GroupCommit<T> {
  const maxItems = opts.maxItems ?? 1000;
  const concurrency = opts.concurrency ?? 1;
  const maxQueued = opts.maxQueuedItems ?? QUEUED_BATCHES * maxItems;
  const maxWaitMs = opts.maxWaitMs ?? MAX_QUEUE_WAIT_MS;
  const what = opts.what ?? 'item';
  const clock = opts.now ?? performance.now.bind(performance);
  const queue: Pending<T>[] = [];
  let queuedItems = 0;
  let inFlight = 0;
  let idle: (() => void)[] = [];
  let scheduled = false;
  let expiry: NodeJS.Timeout | null = null;

  const unavailable = (detail: string) => new ObservatoryError('unavailable', detail, { headers: { 'retry-after': RETRY_AFTER_S } });
  const abandoned = () => unavailable(`the request was abandoned before its ${what} was written; nothing was stored`);

  /** Refuses the queued items that waited maxWaitMs (they are at the head: the queue is in arrival order), then waits for the next head. */
  function expire(): void {
    expiry = null;
    const t = clock();
    while (queue.length > 0 && (t - queue[0]!.at >= maxWaitMs || queue[0]!.gone?.aborted === true)) {
      const p = queue.shift()!;
      queuedItems -= p.items.length;
      p.reject(
        p.gone?.aborted === true
          ? abandoned()
          : unavailable(`the database did not take this ${what} within ${maxWaitMs} ms; it was not stored, retry shortly`),
      );
    }
    armExpiry();
    wakeIdle();
  }

  function armExpiry(): void {
    if (expiry !== null || queue.length === 0) return;
    expiry = setTimeout(expire, Math.max(0, queue[0]!.at + maxWaitMs - clock()));
    expiry.unref();
  }

  function wakeIdle(): void {
    if (inFlight === 0 && queue.length === 0 && idle.length > 0) {
      const waiters = idle;
      idle = [];
      for (const w of waiters) w();
    }
  }

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
        queuedItems -= p.items.length;
        // A caller gone before its write began: its items are not written (its retry would be a duplicate).
        if (p.gone?.aborted === true) {
          p.reject(abandoned());
          continue;
        }
        n += p.items.length;
        batch.push(p);
      }
      if (batch.length === 0) continue;
      inFlight++;
      void writeBatch(batch).finally(() => {
        inFlight--;
        schedule();
      });
    }
    wakeIdle();
  }

  return {
    submit(items, gone) {
      if (items.length === 0) return Promise.resolve();
      // Full: refused at once (one caller larger than the bound is taken when nothing else waits).
      if (queuedItems > 0 && queuedItems + items.length > maxQueued) {
        return Promise.reject(unavailable(`the database is not keeping up: ${queuedItems} ${what}s are waiting to be written; this one was not stored, retry shortly`));
      }
      return new Promise<void>((resolve, reject) => {
        queue.push({ items, resolve, reject, at: clock(), gone });
        queuedItems += items.length;
        armExpiry();
        schedule();
      });
    },
    queued: () => queuedItems,
    drain() {
      if (inFlight === 0 && queue.length === 0) return Promise.resolve();
      return new Promise((r) => idle.push(r));
    },
  };
}
