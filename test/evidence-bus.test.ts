import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../src/db/postgres.js';
import { EVIDENCE_CHANNEL, EVIDENCE_NOTIFY_MS, evidencePayloads, parseEvidencePayload, startEvidenceBus, type EvidenceBus } from '../src/services/evidence-bus.js';
import { notifyServersChanged, onTelemetryCommitted } from '../src/store/telemetry.js';
import type { Db } from '../src/db/index.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { eventually } from './support/connections.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';

// LISTEN/NOTIFY between instances (issue 23 item 4): a report on instance A drops instance B's
// cached score for that server when it commits, so B shows it at once instead of after
// SCORE_CACHE_MS. Two createObservatory instances, each with its own pool, on one PostgreSQL.

describe('evidence payloads', () => {
  it('split under the NOTIFY limit and parse back; malformed payloads are ignored', () => {
    const ids = Array.from({ length: 5000 }, (_, i) => 1_000_000 + i);
    const payloads = evidencePayloads('me', ids);
    expect(payloads.length).toBeGreaterThan(1);
    for (const p of payloads) expect(Buffer.byteLength(p)).toBeLessThan(8000);
    expect(payloads.flatMap((p) => parseEvidencePayload(p)!.ids)).toEqual(ids);
    for (const bad of ['', '|1', 'me|', 'me|1,,2', 'me|1;DROP', 'me|-1', 'me|1e9', `me|${'1'.repeat(16)}`, `me|${'1,'.repeat(5000)}1`]) expect(parseEvidencePayload(bad)).toBeNull();
  });
});

describe('evidence bus rounds', () => {
  // A stand-in database that records every pg_notify (the bus only needs query and listen).
  function recordingDb() {
    const sent: string[] = [];
    const db = {
      kind: 'postgres',
      async query(sql: string, params: unknown[]) {
        if (sql.includes('pg_notify')) sent.push(String(params[1]));
        return [];
      },
      async listen() {
        return { close: async () => {} };
      },
    } as unknown as Db;
    return { db, sent };
  }
  const turn = () => new Promise((r) => setImmediate(r));

  it('announces continuous commits in at most one round per EVIDENCE_NOTIFY_MS, every id included', async () => {
    const { db, sent } = recordingDb();
    const bus = await startEvidenceBus(db);
    const t0 = performance.now();
    for (let i = 1; i <= 50; i++) {
      notifyServersChanged(db, [i]); // a commit per event-loop turn, as under continuous ingestion
      await turn();
    }
    const elapsed = performance.now() - t0;
    // The first commit is announced at once; the rest wait for the next round.
    expect(sent.length).toBeGreaterThanOrEqual(1);
    expect(sent.length).toBeLessThanOrEqual(Math.ceil(elapsed / EVIDENCE_NOTIFY_MS) + 1);
    expect(await eventually(() => sent.flatMap((p) => parseEvidencePayload(p)!.ids).length === 50, 5_000)).toBe(true);
    expect(sent.flatMap((p) => parseEvidencePayload(p)!.ids).sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    // A commit after a quiet spell goes out after its own turn, not after a round.
    await new Promise((r) => setTimeout(r, EVIDENCE_NOTIFY_MS + 20));
    const before = sent.length;
    notifyServersChanged(db, [99]);
    await turn();
    await turn();
    expect(sent.slice(before).map((p) => parseEvidencePayload(p)!.ids)).toEqual([[99]]);
    // What waits for its round when the bus closes is sent by close().
    notifyServersChanged(db, [100]);
    await turn();
    await bus.close();
    expect(sent.flatMap((p) => parseEvidencePayload(p)!.ids)).toContain(100);
  });

  it('close() also sends a commit of the current turn after a quiet spell (not yet sent, no round waiting)', async () => {
    const { db, sent } = recordingDb();
    const bus = await startEvidenceBus(db);
    notifyServersChanged(db, [7]);
    await bus.close();
    await turn();
    expect(sent.map((p) => parseEvidencePayload(p)!.ids)).toEqual([[7]]);
  });
});

describe.skipIf(backend !== 'pglite')('evidence bus on PGlite', () => {
  it('is off: one process, nobody to tell', async () => {
    const tdb = await createTestDatabase();
    try {
      const bus = await startEvidenceBus(tdb.db);
      expect(bus.enabled).toBe(false);
      await bus.close();
    } finally {
      await tdb.drop();
    }
  });
});

describe.skipIf(backend !== 'postgres')('two instances: new evidence reaches the other at once (LISTEN/NOTIFY)', () => {
  let tdb: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  let busA: EvidenceBus;
  let busB: EvidenceBus;
  const url = 'https://notify.example.com/mcp';
  const trustOn = (t: TestApp) => json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`));

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const own = () => ({ db: openPostgres(tdb.url!), url: tdb.url, drop: async () => {} });
    a = await startTestApp({}, { tdb: own() });
    b = await startTestApp({}, { tdb: own() });
    [busA, busB] = await Promise.all([a.obs.services.evidenceBus, b.obs.services.evidenceBus]);
  }, 120_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await tdb?.drop();
  });

  /** Resolves with the server ids of the next notification B applies. */
  // The next evidence event on B (A's NOTIFY, or B's own aggregator folding A's rows), optionally
  // the first one naming `id` (a late event about an earlier report may come first).
  const nextOnB = (id?: number) =>
    new Promise<number[]>((resolve) => {
      const off = onTelemetryCommitted(b.obs.db, (ids) => {
        if (id !== undefined && !ids.includes(id)) return;
        off();
        resolve(ids);
      });
    });

  it('a report on A drops B\'s cached score for that server, so B shows it on its next read', async () => {
    expect(busA.enabled && busB.enabled).toBe(true);
    // The first report is news to B once its event arrived (the cross-instance bound, not at once).
    const heard = nextOnB();
    expect((await postJson(`${a.base}/api/report`, { server_url: url, success: true, latency_ms: 30 })).status).toBe(200);
    await heard;
    const first = await trustOn(b);
    expect(first.metrics.total_interactions).toBe(1);
    // B now holds the score in memory (SCORE_CACHE_MS). A's next report reaches it by NOTIFY.
    const told = nextOnB();
    expect((await postJson(`${a.base}/api/report`, { server_url: url, success: false, latency_ms: 900 })).status).toBe(200);
    const ids = await told;
    const id = (await tdb.db.query<{ id: number }>('SELECT id FROM servers WHERE url = $1', [url]))[0]!.id;
    expect(ids).toEqual([id]);
    const second = await trustOn(b);
    expect(second.metrics.total_interactions).toBe(2);
    expect(second.metrics.success_rate).toBe(0.5);
    expect(busA.counts().sent).toBeGreaterThanOrEqual(2);
    expect(busB.counts().received).toBeGreaterThanOrEqual(2);
  });

  it('works both ways, and an instance ignores its own notifications', async () => {
    const ownByB = busB.counts().ownIgnored;
    const receivedByA = busA.counts().received;
    const told = new Promise<number[]>((resolve) => {
      const off = onTelemetryCommitted(a.obs.db, (ids) => {
        if (busA.counts().received > receivedByA) {
          off();
          resolve(ids);
        }
      });
    });
    expect((await postJson(`${b.base}/api/report`, { server_url: url, success: true, latency_ms: 40 })).status).toBe(200);
    await told;
    expect(busA.counts().received).toBeGreaterThan(receivedByA);
    expect((await trustOn(a)).metrics.total_interactions).toBe(3);
    // B sent it and heard it back on the channel, but did not apply its own notification as a
    // remote one. (B may still receive A's: the instance whose aggregator folded B's rows announces the fold.)
    expect(await eventually(() => busB.counts().ownIgnored > ownByB, 30_000)).toBe(true);
  });

  it('a malformed or foreign NOTIFY on the channel changes nothing and breaks nothing', async () => {
    // Let the announcements of the folds of the earlier reports arrive first (B counts what it receives).
    for (let last = -1, i = 0; i < 20 && busB.counts().received !== last; i++) {
      last = busB.counts().received;
      await new Promise((r) => setTimeout(r, 750));
    }
    const before = busB.counts().received;
    await tdb.db.query('SELECT pg_notify($1, $2)', [EVIDENCE_CHANNEL, 'x|1;DROP TABLE servers']);
    await tdb.db.query('SELECT pg_notify($1, $2)', [EVIDENCE_CHANNEL, 'garbage']);
    // A well-formed one after them arrives and is applied: the listener is still there.
    const told = nextOnB(424242);
    await tdb.db.query('SELECT pg_notify($1, $2)', [EVIDENCE_CHANNEL, 'someone-else|424242']);
    expect(await told).toEqual([424242]);
    expect(busB.counts().received).toBe(before + 1);
    expect((await trustOn(b)).metrics.total_interactions).toBe(3);
  });
});
