import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/db/index.js';
import { openPglite } from '../src/db/pglite.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { rollupAggregator, rollupsAppended, settleRollups } from '../src/store/rollup-aggregator.js';
import { serverStore } from '../src/store/servers.js';
import { telemetryStore, type IngestRow } from '../src/store/telemetry.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { latencyBin, LATENCY_BINS } from '../src/domain/latency-histogram.js';
import { decayFactor } from '../src/domain/scoring.js';
import { HOUR_MS } from '../src/domain/anomaly.js';

// The rollup aggregator (issue 22 item 1): raw appends are the acknowledged write; rollups are
// folded from committed raw rows, exactly once, whatever the order of commits and crashes.

const T0 = new Date('2026-11-20T10:00:00Z');

let seeded = 0;
async function seedServers(db: Db, n: number): Promise<{ id: number; url: string }[]> {
  const out: { id: number; url: string }[] = [];
  for (let i = 0; i < n; i++) {
    const k = seeded++;
    const url = `https://agg-${k}.example.com/mcp`;
    const row = await serverStore(db).insertNew({ url, name: `agg-${k}`, slug: `agg-${k}`, category: 'general' }, T0);
    out.push({ id: row!.id, url });
  }
  return out;
}

function rows(servers: { id: number; url: string }[], count: number, tag: string): IngestRow[] {
  return Array.from({ length: count }, (_, i) => {
    const s = servers[i % servers.length]!;
    return {
      serverId: s.id,
      at: new Date(T0.getTime() + (i % 7) * 1_800_000 + i),
      source: `src-${i % 3}`,
      report: { server_url: s.url, success: i % 5 !== 0, latency_ms: 10 + (i % 40), tool_name: tag, http_status: i % 11 === 0 ? 503 : 200 },
    };
  });
}

/** The rollups as stored, next to the same sums computed straight from the raw rows. */
async function compare(db: Db): Promise<{ stored: unknown; fromRaw: unknown }> {
  const stored = {
    totals: await db.query('SELECT server_id::int AS s, n::int, successes::int AS ok, n_5xx::int AS f, round(latency_sum::numeric, 3)::float8 AS l FROM server_totals ORDER BY 1'),
    hourly: await db.query('SELECT server_id::int AS s, bucket, source, n::int, successes::int AS ok FROM telemetry_hourly ORDER BY 1, 2, 3'),
    evidence: await db.query('SELECT server_id::int AS s, source, reports::int AS n FROM trust_evidence ORDER BY 1, 2'),
  };
  const fromRaw = {
    totals: await db.query(
      `SELECT server_id::int AS s, count(*)::int AS n, count(*) FILTER (WHERE success)::int AS ok,
              count(*) FILTER (WHERE http_status BETWEEN 500 AND 599)::int AS f, round(sum(latency_ms)::numeric, 3)::float8 AS l
         FROM telemetry GROUP BY 1 ORDER BY 1`,
    ),
    hourly: await db.query(
      `SELECT server_id::int AS s, date_trunc('hour', received_at) AS bucket, source, count(*)::int AS n, count(*) FILTER (WHERE success)::int AS ok
         FROM telemetry GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
    ),
    evidence: await db.query('SELECT server_id::int AS s, source, count(*)::int AS n FROM telemetry GROUP BY 1, 2 ORDER BY 1, 2'),
  };
  return { stored, fromRaw };
}

const watermark = (db: Db) => db.query<{ horizon: string; pending: string[]; folded_rows: number }>("SELECT horizon::text, pending::text[], folded_rows::int8 FROM rollup_watermark WHERE name = 'rollups'");

function runChild(args: string[]): Promise<{ signal: NodeJS.Signals | null; code: number | null; out: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/rollup-crash-child.ts', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out })));
}

/** A fresh database for the enclosing describe block: made before its tests (then `init`), dropped after them. */
function suiteDatabase(init?: (db: Db) => void): TestDatabase {
  let current: TestDatabase | undefined;
  beforeAll(async () => {
    current = await createTestDatabase();
    init?.(current.db);
  }, 120_000);
  afterAll(async () => {
    await current?.drop();
  });
  return {
    get db() {
      return current!.db;
    },
    get url() {
      return current!.url;
    },
    drop: async () => current?.drop(),
  };
}

describe(`rollup aggregator (${backend})`, () => {
  const tdb = suiteDatabase();

  it('folds appended rows exactly once; a read in the same process sees them without waiting for the timer', async () => {
    const servers = await seedServers(tdb.db, 5);
    const store = telemetryStore(tdb.db);
    // Concurrent appends and passes interleaved.
    await Promise.all([
      ...Array.from({ length: 8 }, (_, k) => store.append(rows(servers, 40, `a${k}`))),
      rollupAggregator(tdb.db).pass(),
      rollupAggregator(tdb.db).pass(),
    ]);
    // No explicit pass: the read settles first.
    const totals = await store.totals(servers.map((s) => s.id));
    expect([...totals.values()].reduce((n, t) => n + Number(t.n), 0)).toBe(320);
    const { stored, fromRaw } = await compare(tdb.db);
    expect(stored).toEqual(fromRaw);
    // Passes with nothing new change nothing.
    await rollupAggregator(tdb.db).pass();
    await rollupAggregator(tdb.db).pass();
    expect((await compare(tdb.db)).stored).toEqual(stored);
  }, 120_000);

  it('a read of some servers waits only for the passes covering their own appends (any server after a notification of unknown rows)', async () => {
    const [a, b] = await seedServers(tdb.db, 2);
    const store = telemetryStore(tdb.db);
    await rollupAggregator(tdb.db).pass();
    const folded = async () => Number((await tdb.db.query<{ n: string }>("SELECT folded_rows::text AS n FROM rollup_watermark WHERE name = 'rollups'"))[0]!.n);
    const before = await folded();
    await store.append(rows([a!], 3, 'only-a'));
    // B had no append since the last pass: nothing to wait for, no pass runs.
    await settleRollups(tdb.db, [b!.id]);
    expect(await folded()).toBe(before);
    // A's read waits for (runs) the pass that covers A's rows.
    await settleRollups(tdb.db, [a!.id]);
    expect(await folded()).toBe(before + 3);
    expect(Number((await store.totals([a!.id])).get(a!.id)?.n)).toBe(3);
    // Rows of unknown servers (another instance's notification): every read waits for a pass.
    await store.append(rows([a!], 2, 'a-again'));
    rollupsAppended(tdb.db);
    await settleRollups(tdb.db, [b!.id]);
    expect(await folded()).toBe(before + 5);
  }, 120_000);

  it('a process killed between the fold and the watermark update leaves nothing folded; the next pass folds each row once', async () => {
    const servers = await seedServers(tdb.db, 3);
    // Rows appended on a handle whose process "dies" before folding: raw rows only.
    let child: { signal: NodeJS.Signals | null; code: number | null; out: string };
    if (backend === 'postgres') {
      const other = openPostgres(tdb.url!);
      await telemetryStore(other).append(rows(servers, 90, 'crash'));
      await other.close();
      const before = await compare(tdb.db);
      const wmBefore = await watermark(tdb.db);
      expect(before.stored).not.toEqual(before.fromRaw);
      child = await runChild([tdb.url!]);
      expect(child.out).toContain('folded');
      expect(child.signal).toBe('SIGKILL');
      // The killed pass's transaction died with its connection: rollups and watermark as before.
      expect((await compare(tdb.db)).stored).toEqual(before.stored);
      expect(await watermark(tdb.db)).toEqual(wmBefore);
      const r = await rollupAggregator(tdb.db).pass();
      expect(r.folded).toBe(90);
      const after = await compare(tdb.db);
      expect(after.stored).toEqual(after.fromRaw);
    } else {
      // PGlite is one process: the same crash on its own data directory.
      const dir = await mkdtemp(join(tmpdir(), 'obs-rollup-crash-'));
      try {
        let db = await openPglite(dir);
        await migrate(db);
        const own = await seedServers(db, 3);
        await telemetryStore(db).append(rows(own, 90, 'crash'));
        const before = await compare(db);
        const wmBefore = await watermark(db);
        expect(before.stored).not.toEqual(before.fromRaw);
        await db.close();
        child = await runChild(['--pglite', dir]);
        expect(child.out).toContain('folded');
        expect(child.signal).toBe('SIGKILL');
        db = await openPglite(dir);
        expect((await compare(db)).stored).toEqual(before.stored);
        expect(await watermark(db)).toEqual(wmBefore);
        expect((await rollupAggregator(db).pass()).folded).toBe(90);
        const after = await compare(db);
        expect(after.stored).toEqual(after.fromRaw);
        await db.close();
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
      void servers;
    }
  }, 180_000);

  it.skipIf(backend !== 'postgres')('a transaction that commits after a later one was folded is folded too (commit order is not id order)', async () => {
    const servers = await seedServers(tdb.db, 2);
    const a = openPostgres(tdb.url!);
    const b = openPostgres(tdb.url!);
    try {
      let release!: () => void;
      const hold = new Promise<void>((r) => (release = r));
      let inserted!: () => void;
      const didInsert = new Promise<void>((r) => (inserted = r));
      // A: appends inside an open transaction (its raw ids come first), commits only later.
      const slow = a.transaction(async (tx) => {
        await tx.query(
          `INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status, source, xid)
           VALUES ($1, $2, true, 12, 'slow', 200, 'src-slow', pg_current_xact_id()::text::int8)`,
          [servers[0]!.id, T0],
        );
        inserted();
        await hold;
      });
      await didInsert;
      // B: appends and commits; a pass folds B's rows while A is still running.
      await telemetryStore(b).append(rows(servers, 10, 'fast'));
      await rollupAggregator(b).pass();
      const [mid] = await b.query<{ ids: string }>("SELECT (SELECT count(*) FROM telemetry WHERE tool_name = 'slow')::text AS ids");
      expect(mid!.ids).toBe('0'); // not visible yet
      expect((await watermark(b))[0]!.pending.length).toBeGreaterThan(0);
      release();
      await slow;
      await rollupAggregator(b).pass();
      const after = await compare(tdb.db);
      expect(after.stored).toEqual(after.fromRaw);
      expect((await watermark(b))[0]!.pending.map(String)).not.toContain(undefined);
    } finally {
      await a.close();
      await b.close();
    }
  }, 120_000);

  it.skipIf(backend !== 'postgres')('two instances: one folds what the other acknowledged, no row is folded twice', async () => {
    const servers = await seedServers(tdb.db, 4);
    const a = openPostgres(tdb.url!);
    const b = openPostgres(tdb.url!);
    try {
      const errors: unknown[] = [];
      rollupAggregator(b).start(50, (e) => errors.push(e));
      const aStore = telemetryStore(a);
      for (let k = 0; k < 10; k++) await Promise.all([aStore.append(rows(servers, 25, `x${k}`)), rollupAggregator(a).pass()]);
      // A stops appending and never folds again; B's background pass folds the rest.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const { stored, fromRaw } = await compare(tdb.db);
        if (JSON.stringify(stored) === JSON.stringify(fromRaw)) break;
        if (Date.now() > deadline) expect(stored).toEqual(fromRaw);
        await new Promise((r) => setTimeout(r, 100));
      }
      await rollupAggregator(b).stop();
      expect(errors).toEqual([]);
    } finally {
      await a.close();
      await b.close();
    }
  }, 120_000);

  it.skipIf(backend !== 'postgres')('passes of different instances never overlap (advisory lock)', async () => {
    const servers = await seedServers(tdb.db, 2);
    let active = 0;
    let most = 0;
    const hooks = {
      afterFold: async () => {
        active++;
        most = Math.max(most, active);
        await new Promise((r) => setTimeout(r, 30));
        active--;
      },
    };
    const handles = [openPostgres(tdb.url!), openPostgres(tdb.url!), openPostgres(tdb.url!)];
    try {
      const aggs = handles.map((h) => rollupAggregator(h, hooks));
      await Promise.all(handles.flatMap((h, i) => [telemetryStore(h).append(rows(servers, 20, `o${i}`)), aggs[i]!.pass(), aggs[i]!.pass()]));
      await Promise.all(aggs.map((g) => g.pass()));
      expect(most).toBe(1);
      const { stored, fromRaw } = await compare(tdb.db);
      expect(stored).toEqual(fromRaw);
    } finally {
      for (const h of handles) await h.close();
    }
  }, 120_000);
});

// A pass folds at most a bounded number of rows, cut at a transaction boundary (the watermark
// counts transactions). Both ways a cut went wrong lost rows for good: a single transaction with
// more rows than the bound (the pass folded the first rows and moved the horizon past the rest),
// and a cut among formerly pending transactions below the horizon (the pass dropped them all
// from the pending list). A small bound makes both cheap to reach.
describe(`rollup aggregator, passes cut short (${backend})`, () => {
  const LIMIT = 10;
  const tdb = suiteDatabase((db) => rollupAggregator(db, { foldMaxRows: LIMIT }));

  const passUntilComplete = async (db: Db) => {
    let passes = 0;
    while (!(await rollupAggregator(db).pass()).complete) passes++;
    return passes;
  };

  it('a transaction with more rows than one pass folds is folded whole, and the backlog behind it too', async () => {
    const servers = await seedServers(tdb.db, 3);
    const store = telemetryStore(tdb.db);
    await store.append(rows(servers, 25, 'big'));
    await store.append(rows(servers, 4, 'small-1'));
    await store.append(rows(servers, 9, 'small-2'));
    const cut = await passUntilComplete(tdb.db);
    const { stored, fromRaw } = await compare(tdb.db);
    expect(stored).toEqual(fromRaw);
    expect(cut).toBeGreaterThan(0);
    expect(Number((await watermark(tdb.db))[0]!.folded_rows)).toBe(38);
  }, 120_000);

  it.skipIf(backend !== 'postgres')('formerly pending transactions with more rows than one pass folds are all folded, over several passes', async () => {
    const servers = await seedServers(tdb.db, 2);
    const handles = [openPostgres(tdb.url!), openPostgres(tdb.url!)];
    let release!: () => void;
    const hold = new Promise<void>((r) => (release = r));
    let open: Promise<void>[] = [];
    try {
      // The held transactions' ids: the watermark's pending list is over the whole cluster's
      // transaction ids, so other databases' running transactions (other test files) may be in it.
      const heldXids: string[] = [];
      let allInserted!: () => void;
      const inserted = new Promise<void>((r) => (allInserted = r));
      // Two transactions append 8 rows each and stay open while a pass runs: both go pending.
      open = handles.map((h, i) =>
        h.transaction(async (tx) => {
          const [row] = await tx.query<{ xid: string }>(
            `INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status, source, xid)
             SELECT $1, $2::timestamptz + g * interval '1 second', g % 2 = 0, 10 + g, 'held', 200, 'src-held', pg_current_xact_id()::text::int8
               FROM generate_series(1, 8) g
             RETURNING xid::text AS xid`,
            [servers[i]!.id, T0],
          );
          heldXids.push(row!.xid);
          if (heldXids.length === handles.length) allInserted();
          await hold;
        }),
      );
      await inserted;
      // A later transaction commits first: a snapshot's xmax is one past the latest completed
      // transaction, so only now are the held ones below it and listed as running (pending).
      await telemetryStore(tdb.db).append(rows(servers, 3, 'between'));
      await passUntilComplete(tdb.db);
      const held = await watermark(tdb.db);
      expect(heldXids.filter((x) => held[0]!.pending.includes(x)), JSON.stringify(held)).toEqual(heldXids);
      release();
      await Promise.all(open);
      // Committed now, below the horizon, 16 rows: more than one pass folds. Plus newer rows.
      await telemetryStore(tdb.db).append(rows(servers, 5, 'after'));
      const cut = await passUntilComplete(tdb.db);
      const { stored, fromRaw } = await compare(tdb.db);
      expect(stored).toEqual(fromRaw);
      expect(cut).toBeGreaterThan(0);
      const after = await watermark(tdb.db);
      expect(heldXids.filter((x) => after[0]!.pending.includes(x)), JSON.stringify(after)).toEqual([]);
    } finally {
      // A failed expectation must not leave the held transactions open (closing waits for them).
      release();
      await Promise.allSettled(open);
      for (const h of handles) await h.close();
    }
  }, 120_000);
});

// The fold runs in PostgreSQL (one statement of writable CTEs). Its figures must be exactly what
// the domain's own functions give for the same rows: latencyBin's histogram, decayFactor's
// weights (each group brought to its newest report, then merged with the stored accumulator),
// the UTC hour bucket, the 5xx count, first and last report, per-tool groups only for reports
// naming a tool. Rows cover every latency bin edge, both ends of the 5xx range and ten days of
// reports, folded over several passes so the stored accumulators merge too.
describe(`rollup aggregator: the SQL fold computes what the domain functions compute (${backend})`, () => {
  const tdb = suiteDatabase();

  it('histograms, decayed evidence, hour buckets, 5xx and per-tool groups', async () => {
    const servers = await seedServers(tdb.db, 3);
    const latencies = [0, 4.99, 5, 9.5, 10, 49.9, 50, 999, 1000, 5000.5, 59_999, 60_000, 125_000, 0.25, 20, 300];
    const statuses = [null, 200, 499, 500, 503, 599, 600];
    const all: IngestRow[] = [];
    for (let i = 0; i < 120; i++) {
      const s = servers[i % 3]!;
      all.push({
        serverId: s.id,
        // Ten days, irregular, some in the same hour.
        at: new Date(T0.getTime() + ((i * 7_919_111) % (10 * 86_400_000)) + (i % 4) * 61_000),
        source: `src-${i % 4}`,
        report: { server_url: s.url, success: i % 3 !== 0, latency_ms: latencies[i % latencies.length]!, tool_name: i % 5 === 0 ? null : `tool-${i % 2}`, http_status: statuses[i % statuses.length]! },
      });
    }
    const store = telemetryStore(tdb.db);
    for (let k = 0; k < 4; k++) {
      await store.append(all.slice(k * 30, k * 30 + 30));
      await rollupAggregator(tdb.db).pass();
    }

    const ids = servers.map((s) => s.id);
    const group = (key: (r: IngestRow) => string) => {
      const m = new Map<string, IngestRow[]>();
      for (const r of all) m.set(key(r), [...(m.get(key(r)) ?? []), r]);
      return m;
    };
    const hist = (rs: IngestRow[]) => {
      const h = new Array<number>(LATENCY_BINS).fill(0);
      for (const r of rs) h[latencyBin(r.report.latency_ms)]!++;
      return h;
    };
    const is5xx = (r: IngestRow) => r.report.http_status !== null && r.report.http_status >= 500 && r.report.http_status <= 599;
    const decayed = (rs: IngestRow[]) => {
      const at = Math.max(...rs.map((r) => r.at.getTime()));
      let w = 0, ok = 0, l = 0;
      for (const r of rs) {
        const f = decayFactor(at - r.at.getTime());
        w += f;
        if (r.report.success) ok += f;
        l += f * r.report.latency_ms;
      }
      return { w, ok, l, n: rs.length, at };
    };

    const totals = await tdb.db.query<{ s: string; n: string; ok: string; f: string; l: number; hist: (string | number)[]; first_at: Date; last_at: Date }>(
      'SELECT server_id::text AS s, n::text, successes::text AS ok, n_5xx::text AS f, latency_sum AS l, hist, first_at, last_at FROM server_totals WHERE server_id = ANY($1::int8[])', [ids]);
    expect(totals).toHaveLength(3);
    for (const t of totals) {
      const rs = all.filter((r) => String(r.serverId) === t.s);
      expect({ n: Number(t.n), ok: Number(t.ok), f: Number(t.f), hist: t.hist.map(Number), first: t.first_at.getTime(), last: t.last_at.getTime() }).toEqual({
        n: rs.length, ok: rs.filter((r) => r.report.success).length, f: rs.filter(is5xx).length, hist: hist(rs),
        first: Math.min(...rs.map((r) => r.at.getTime())), last: Math.max(...rs.map((r) => r.at.getTime())),
      });
      expect(Number(t.l)).toBeCloseTo(rs.reduce((a, r) => a + r.report.latency_ms, 0), 6);
    }

    const hourly = await tdb.db.query<{ s: string; bucket: Date; source: string; n: string; f: string; hist: (string | number)[] }>(
      'SELECT server_id::text AS s, bucket, source, n::text, n_5xx::text AS f, hist FROM telemetry_hourly WHERE server_id = ANY($1::int8[])', [ids]);
    const expectedHours = group((r) => `${r.serverId}|${Math.floor(r.at.getTime() / HOUR_MS) * HOUR_MS}|${r.source}`);
    expect(hourly).toHaveLength(expectedHours.size);
    for (const h of hourly) {
      const rs = expectedHours.get(`${h.s}|${h.bucket.getTime()}|${h.source}`);
      expect(rs, `${h.s} ${h.bucket.toISOString()} ${h.source}`).toBeDefined();
      expect({ n: Number(h.n), f: Number(h.f), hist: h.hist.map(Number) }).toEqual({ n: rs!.length, f: rs!.filter(is5xx).length, hist: hist(rs!) });
    }

    const evidence = await tdb.db.query<{ s: string; source: string; weight: number; successes: number; latency_sum: number; reports: string; updated_at: Date }>(
      'SELECT server_id::text AS s, source, weight, successes, latency_sum, reports::text, updated_at FROM trust_evidence WHERE server_id = ANY($1::int8[])', [ids]);
    const bySource = group((r) => `${r.serverId}|${r.source}`);
    expect(evidence).toHaveLength(bySource.size);
    for (const e of evidence) {
      const d = decayed(bySource.get(`${e.s}|${e.source}`)!);
      expect({ n: Number(e.reports), at: e.updated_at.getTime() }).toEqual({ n: d.n, at: d.at });
      expect(Number(e.weight)).toBeCloseTo(d.w, 9);
      expect(Number(e.successes)).toBeCloseTo(d.ok, 9);
      expect(Number(e.latency_sum)).toBeCloseTo(d.l, 6);
    }

    const tools = await tdb.db.query<{ s: string; tool: string; source: string; weight: number; reports: string }>(
      'SELECT server_id::text AS s, tool_name AS tool, source, weight, reports::text FROM tool_evidence WHERE server_id = ANY($1::int8[])', [ids]);
    const byTool = group((r) => `${r.serverId}|${r.report.tool_name}|${r.source}`);
    for (const k of [...byTool.keys()]) if (k.includes('|null|')) byTool.delete(k);
    expect(tools).toHaveLength(byTool.size);
    for (const t of tools) {
      const d = decayed(byTool.get(`${t.s}|${t.tool}|${t.source}`)!);
      expect(Number(t.reports)).toBe(d.n);
      expect(Number(t.weight)).toBeCloseTo(d.w, 9);
    }
  }, 120_000);

  it('evidence decades apart merges to the newer report instead of failing the pass (PostgreSQL underflow)', async () => {
    const [srv] = await seedServers(tdb.db, 1);
    const row = (at: Date): IngestRow => ({ serverId: srv!.id, at, source: 'old-and-new', report: { server_url: srv!.url, success: true, latency_ms: 10, tool_name: 'x', http_status: 200 } });
    const store = telemetryStore(tdb.db);
    // Two rows 36 years apart in one pass (decayed within the group), then a third in a later pass (merged).
    await store.append([row(new Date('1990-01-01T00:00:00Z')), row(new Date('2026-01-01T00:00:00Z'))]);
    await rollupAggregator(tdb.db).pass();
    await store.append([row(new Date('1989-06-01T00:00:00Z'))]);
    await rollupAggregator(tdb.db).pass();
    await store.append([row(T0)]);
    await rollupAggregator(tdb.db).pass();
    const [e] = await tdb.db.query<{ weight: number; reports: string }>("SELECT weight, reports::text FROM trust_evidence WHERE server_id = $1 AND source = 'old-and-new'", [srv!.id]);
    expect(Number(e!.reports)).toBe(4);
    expect(Number(e!.weight)).toBeCloseTo(1 + decayFactor(T0.getTime() - Date.parse('2026-01-01T00:00:00Z')), 9);
  }, 120_000);
});
