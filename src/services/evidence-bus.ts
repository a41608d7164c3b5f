// Instances tell each other about new evidence (docs/deployment.md "New evidence reaches every
// instance within 100 ms"). Every instance caches scores, ranked lists and baselines for
// SCORE_CACHE_MS; evidence committed by this process drops its own entries at once
// (onTelemetryCommitted), and this bus carries the same signal to the other instances on the same
// PostgreSQL through LISTEN/NOTIFY, so a report on instance A shows on instance B within
// EVIDENCE_NOTIFY_MS instead of after the bound.
//
// Hooked where evidence becomes visible (the cache invalidation), whatever wrote it: the server
// ids of each commit are sent with pg_notify after the commit, coalesced into at most one round
// per EVIDENCE_NOTIFY_MS and split to stay under NOTIFY's 8000-byte payload limit. A notification
// received from another instance is applied exactly like a local commit (notifyServersChanged)
// and not sent on again.
// A listener connection that drops is reconnected; what was sent meanwhile is missed, and the
// caches fall back to their bound. PGlite is one process: there is nobody to tell, the bus is off.
import { randomUUID } from 'node:crypto';
import type { Db } from '../db/index.js';
import { rollupsAppended } from '../store/rollup-aggregator.js';
import { notifyServersChanged, onTelemetryCommitted } from '../store/telemetry.js';

export const EVIDENCE_CHANNEL = 'observatory_evidence';
/** NOTIFY payloads must stay under 8000 bytes. */
const MAX_PAYLOAD = 7900;
/**
 * At most one round of notifications per this long: commits within it are announced together.
 * The first commit after a quiet spell is announced at once (after its event-loop turn); under
 * continuous ingestion every commit (a group commit every few milliseconds) was a NOTIFY of its
 * own, about a quarter of the database's CPU per report (docs/performance.md "Fewer, larger
 * commits"). So another instance sees a commit within this bound plus the delivery.
 */
export const EVIDENCE_NOTIFY_MS = 100;

export interface EvidenceBus {
  /** False on PGlite (one process: nothing to tell). */
  readonly enabled: boolean;
  /** Notifications sent and applied, since start. */
  /** Notifications sent, applied from other instances, and this instance's own heard back and ignored. */
  counts(): { sent: number; received: number; ownIgnored: number };
  close(): Promise<void>;
}

/** Splits ids into NOTIFY payloads `<sender>|id,id,...`, each under MAX_PAYLOAD bytes. */
export function evidencePayloads(sender: string, ids: readonly number[]): string[] {
  const out: string[] = [];
  let cur: string[] = [];
  let len = sender.length + 1;
  for (const id of ids) {
    const s = String(id);
    if (cur.length > 0 && len + s.length + 1 > MAX_PAYLOAD) {
      out.push(`${sender}|${cur.join(',')}`);
      cur = [];
      len = sender.length + 1;
    }
    cur.push(s);
    len += s.length + 1;
  }
  if (cur.length > 0) out.push(`${sender}|${cur.join(',')}`);
  return out;
}

/** The sender and server ids of a payload; null for anything malformed (ignored). */
export function parseEvidencePayload(payload: string): { sender: string; ids: number[] } | null {
  const bar = payload.indexOf('|');
  if (bar <= 0 || payload.length > 8000) return null;
  const ids: number[] = [];
  for (const part of payload.slice(bar + 1).split(',')) {
    if (!/^\d{1,15}$/.test(part)) return null;
    ids.push(Number(part));
  }
  return { sender: payload.slice(0, bar), ids };
}

export async function startEvidenceBus(db: Db, opts: { onError?: (err: unknown) => void } = {}): Promise<EvidenceBus> {
  if (!db.listen) return { enabled: false, counts: () => ({ sent: 0, received: 0, ownIgnored: 0 }), close: async () => {} };
  const me = randomUUID();
  const n = { sent: 0, received: 0, ownIgnored: 0 };
  let applyingRemote = false;
  let pending = new Set<number>();
  let scheduled = false;
  let timer: NodeJS.Timeout | null = null;
  let lastFlush = -Infinity;
  let closed = false;
  let inflight: Promise<void> = Promise.resolve();

  const flush = () => {
    scheduled = false;
    timer = null;
    lastFlush = performance.now();
    const ids = [...pending];
    pending = new Set();
    if (ids.length === 0 || closed) return;
    inflight = (async () => {
      for (const p of evidencePayloads(me, ids)) {
        try {
          await db.query('SELECT pg_notify($1, $2)', [EVIDENCE_CHANNEL, p]);
          n.sent++;
        } catch (err) {
          opts.onError?.(err); // the others see it after their cache bound instead
        }
      }
    })();
  };

  const off = onTelemetryCommitted(db, (ids) => {
    if (applyingRemote || closed) return;
    for (const id of ids) pending.add(id);
    if (!scheduled) {
      scheduled = true;
      const wait = lastFlush + EVIDENCE_NOTIFY_MS - performance.now();
      if (wait <= 0) setImmediate(flush);
      else timer = setTimeout(flush, wait);
    }
  });

  const listener = await db.listen(EVIDENCE_CHANNEL, (payload) => {
    const msg = parseEvidencePayload(payload);
    if (!msg || closed) return;
    if (msg.sender === me) {
      n.ownIgnored++;
      return;
    }
    n.received++;
    applyingRemote = true;
    try {
      // The sender's raw rows are committed (NOTIFY is sent after the commit) but may not be
      // folded yet: this process's next rollup read runs (or waits for) a pass that covers them.
      rollupsAppended(db);
      notifyServersChanged(db, msg.ids);
    } finally {
      applyingRemote = false;
    }
  });

  return {
    enabled: true,
    counts: () => ({ ...n }),
    async close() {
      // What waits (for its round, or for the end of this turn) is announced now, so the others
      // need not wait for their bound; the flush already scheduled then finds nothing to send.
      if (scheduled) {
        if (timer) clearTimeout(timer);
        flush();
      }
      closed = true;
      off();
      await inflight;
      await listener.close();
    },
  };
}
