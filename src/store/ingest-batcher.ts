import { isConnectionError, type Db } from '../db/index.js';
import { groupCommit, type GroupCommit } from './group-commit.js';
import { telemetryStore, type IngestRow } from './telemetry.js';

/** Largest number of reports written in one transaction. */
export const INGEST_MAX_BATCH = 1000;

/**
 * Group commit for telemetry ingestion: concurrent reports (REST, Connect, gRPC streams) share
 * one transaction (one multi-row INSERT and one update of each rollup row per server and batch).
 * `submit` resolves only after the transaction carrying the rows committed, so a 200 still
 * means "stored". A batch that fails for a reason other than a lost connection is retried
 * caller by caller, so one rejected row cannot fail the reports it happened to travel with.
 * Bounded like every group commit: at most 8 batches' worth of reports wait (beyond: 503 at once),
 * none longer than 5 s for its write to begin (then 503), and a report whose request was abandoned
 * before its write began is not written (src/store/group-commit.ts).
 */
export function ingestBatcher(db: Db, opts: { onBatch?: (size: number) => void } = {}): GroupCommit<IngestRow> {
  const store = telemetryStore(db);
  return groupCommit<IngestRow>({
    write: (rows) => store.append(rows),
    maxItems: INGEST_MAX_BATCH,
    // One transaction at a time on both databases: while one commits, every report arriving
    // meanwhile joins the next. Two overlapping transactions on PostgreSQL halved the batches
    // (about 8 reports per commit at 50 connections) and cost a quarter more database CPU per
    // report (each commit's parse, plan, WAL flush and wake-ups), for no lower latency:
    // docs/performance.md "Fewer, larger commits".
    concurrency: 1,
    onBatch: opts.onBatch,
    isolateOnError: (err) => !isConnectionError(err),
    what: 'report',
  });
}
