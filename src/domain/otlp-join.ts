// Joining an MCP client span with its HTTP child span across exports (docs/telemetry.md "The
// server"). The child carries `url.full` and the HTTP status; it usually ends first, so it comes
// in the same export as its parent or an earlier one, but a Collector or a batch boundary can put
// them in different exports. Unmatched spans are held for a short window, bounded in time and
// count, in memory only. Pure: time is an argument.

import { laterChild, type HttpChild, type McpCall } from './otlp-spans.js';

export interface JoinOptions {
  /** How long a span waits for its partner (0: nothing is held). */
  windowMs: number;
  /** Most held spans of each kind (MCP calls, HTTP children); beyond it the oldest is released. */
  maxSpans: number;
  /** How many recently seen MCP span ids are remembered to drop a re-exported span (default 100000). */
  recentSpans?: number;
}

/** A call ready to become a report: with its HTTP child if one was found. */
export interface Joined<T> {
  call: McpCall;
  child: HttpChild | null;
  /** Whatever the caller attached to the export the call came in (its report source). */
  origin: T;
}

export interface OfferResult<T> {
  /** Calls to write now: joined, needing no child, or released early to make room. */
  ready: Joined<T>[];
  /** Calls of this export now waiting for their child. */
  held: number;
  /** Calls of this export dropped as re-exports of a span already seen. */
  duplicates: number;
  /** Parent keys of this export's HTTP children that joined a call (the others are held or dropped). */
  joinedKeys: ReadonlySet<string>;
}

interface HeldCall<T> {
  call: McpCall;
  origin: T;
  until: number;
}

export function createSpanJoin<T>(opts: JoinOptions) {
  const recentCap = opts.recentSpans ?? 100_000;
  // Insertion-ordered: the first entry is the oldest, so expiry and eviction walk from the front.
  const calls = new Map<string, HeldCall<T>>();
  const children = new Map<string, { child: HttpChild; until: number }>();
  const recent = new Set<string>();

  function remember(key: string): void {
    if (recent.size >= recentCap) {
      const oldest = recent.values().next().value;
      if (oldest !== undefined) recent.delete(oldest);
    }
    recent.add(key);
  }

  return {
    /** Takes one export's calls and children; `origin` travels with each call until it is written. */
    offer(reading: { calls: readonly McpCall[]; children: readonly HttpChild[] }, origin: T, nowMs: number): OfferResult<T> {
      const ready: Joined<T>[] = [];
      let held = 0;
      let duplicates = 0;
      const local = new Map<string, HttpChild>();
      for (const c of reading.children) local.set(c.parentKey, laterChild(local.get(c.parentKey), c));
      const consumed = new Set<string>();
      // Children of calls held from earlier exports.
      for (const [key, child] of local) {
        const h = calls.get(key);
        if (h) {
          calls.delete(key);
          consumed.add(key);
          ready.push({ call: h.call, child, origin: h.origin });
        }
      }
      for (const call of reading.calls) {
        const key = call.joinKey;
        if (key !== null) {
          if (recent.has(key)) {
            duplicates++;
            continue;
          }
          remember(key);
        }
        let child: HttpChild | undefined;
        if (key !== null) {
          child = local.get(key);
          if (child) consumed.add(key);
          else {
            child = children.get(key)?.child;
            if (child) children.delete(key);
          }
        }
        if (child || key === null || call.url !== null || opts.windowMs === 0 || opts.maxSpans === 0) {
          ready.push({ call, child: child ?? null, origin });
          continue;
        }
        calls.set(key, { call, origin, until: nowMs + opts.windowMs });
        held++;
        while (calls.size > opts.maxSpans) {
          const [k, oldest] = calls.entries().next().value!;
          calls.delete(k);
          ready.push({ call: oldest.call, child: null, origin: oldest.origin });
        }
      }
      if (opts.windowMs > 0 && opts.maxSpans > 0) {
        for (const [key, child] of local) {
          if (consumed.has(key)) continue;
          const before = children.get(key);
          children.delete(key); // re-inserted at the end: the newest entry
          children.set(key, { child: laterChild(before?.child, child), until: nowMs + opts.windowMs });
          while (children.size > opts.maxSpans) children.delete(children.keys().next().value!);
        }
      }
      return { ready, held, duplicates, joinedKeys: consumed };
    },

    /** Calls whose window ended (written without a child); children whose window ended are dropped. */
    expire(nowMs: number): Joined<T>[] {
      const out: Joined<T>[] = [];
      for (const [key, h] of calls) {
        if (h.until > nowMs) break;
        calls.delete(key);
        out.push({ call: h.call, child: null, origin: h.origin });
      }
      for (const [key, c] of children) {
        if (c.until > nowMs) break;
        children.delete(key);
      }
      return out;
    },

    /** Forgets span ids as seen (their export failed: the sender's retry must count). */
    forget(keys: readonly (string | null)[]): void {
      for (const k of keys) if (k !== null) recent.delete(k);
    },

    /** Every held call, now (at shutdown: they were acknowledged, so they are written). */
    drain(): Joined<T>[] {
      const out = [...calls.values()].map((h) => ({ call: h.call, child: null, origin: h.origin }));
      calls.clear();
      children.clear();
      return out;
    },

    size: () => ({ calls: calls.size, children: children.size }),
  };
}

export type SpanJoin<T> = ReturnType<typeof createSpanJoin<T>>;
