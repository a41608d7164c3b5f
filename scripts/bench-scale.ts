// Part of `npm run bench` (PostgreSQL; skip with --no-scale): GET /api/trust and GET /api/leaderboard with 10 thousand stored
// reports, then with 10 million, on the same service process and database (PostgreSQL). The
// reports are written directly in SQL (scripts/bench-scale-load.ts), not through HTTP.
import { createScratchDatabase } from '../src/db/scratch.js';
import { SCORE_CACHE_MS } from '../src/services/trust-engine.js';
import { load1, measure, startChild, stopChild } from './bench-harness.js';
import { scaleLoader, SCALE_SOURCES } from './bench-scale-load.js';

const PORT = 18183;
export const SCALE_SMALL = Number(process.env.BENCH_SCALE_SMALL ?? 10_000);
export const SCALE_BIG = Number(process.env.BENCH_SCALE_BIG ?? 10_000_000);

export interface PhaseFigures {
  rps: number;
  mean: number;
  p50: number;
  p99: number;
  load: number;
}
export interface ScalePhase {
  label: string;
  rows: number;
  results: Record<string, PhaseFigures>;
}
export interface ScaleResult {
  scenarios: string[];
  small: ScalePhase;
  big: ScalePhase;
  notes: string[];
}

const MISS = 'GET /api/trust, cache miss (1 connection, each server once)';
const TRUST = 'GET /api/trust (50 connections)';
const BOARD = 'GET /api/leaderboard (50 connections)';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const urlOf = (i: number) => `https://scale-${i}.example.com/mcp`;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export async function runScale(opts: { baseUrl: string; serviceEnv: Record<string, string>; servers: number; duration: number }): Promise<ScaleResult> {
  const step = (what: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} load ${load1()}: scale: ${what}\n`);
  const db = await createScratchDatabase(opts.baseUrl, 'obs_scale');
  const base = `http://127.0.0.1:${PORT}`;
  let svc: Awaited<ReturnType<typeof startChild>> | null = null;
  let loader: Awaited<ReturnType<typeof scaleLoader>> | null = null;
  const notes: string[] = [];
  try {
    svc = await startChild('src/main.ts', { ...opts.serviceEnv, PORT: String(PORT), DATABASE_URL: db.url });
    loader = await scaleLoader(db.url);
    await loader.servers(opts.servers, urlOf);
    const end = new Date(Date.now() - 60_000);

    async function phase(label: string): Promise<ScalePhase> {
      const rows = await loader!.count();
      const results: Record<string, PhaseFigures> = {};
      // Every score computed before has expired: the first pass computes them all (and warms the
      // JIT), the second pass, after the cache bound, measures one computation per server.
      for (let pass = 0; pass < 2; pass++) {
        await sleep(SCORE_CACHE_MS + 300);
        const times: number[] = [];
        const load = load1();
        for (let i = 0; i < opts.servers; i++) {
          const t0 = performance.now();
          const res = await fetch(`${base}/api/trust?url=${encodeURIComponent(urlOf(i))}`);
          await res.arrayBuffer();
          if (!res.ok) throw new Error(`GET /api/trust answered ${res.status}`);
          times.push(performance.now() - t0);
        }
        times.sort((a, b) => a - b);
        const mean = times.reduce((a, b) => a + b, 0) / times.length;
        results[MISS] = { rps: Math.round(1000 / mean), mean, p50: quantile(times, 0.5), p99: quantile(times, 0.99), load };
      }
      // The leaderboard's first call refreshes every stale score (the rollups changed underneath).
      await fetch(`${base}/api/leaderboard`).then((r) => r.arrayBuffer());
      step(`${label}: GET /api/trust`);
      let seq = 0;
      const t = await measure({
        url: base,
        requests: [
          {
            method: 'GET',
            // The counter lives here: autocannon's per-request context starts empty for every
            // request, so a counter kept there never passed 1 (every request hit one server).
            setupRequest: (req) => {
              const i = ++seq;
              return { ...req, path: `/api/trust?url=${encodeURIComponent(urlOf(i % opts.servers))}` };
            },
          },
        ],
      });
      step(`${label}: GET /api/leaderboard`);
      const b = await measure({ url: `${base}/api/leaderboard` });
      for (const [name, r] of [
        [TRUST, t],
        [BOARD, b],
      ] as const) {
        if (r.non2xx + r.errors + r.timeouts > 0) throw new Error(`${name}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`);
        results[name] = { rps: Math.round(r.requests.average), mean: r.latency.mean, p50: r.latency.p50, p99: r.latency.p99, load: r.load };
      }
      return { label, rows, results };
    }

    step(`loading ${SCALE_SMALL.toLocaleString('en')} reports`);
    await loader.growTo(SCALE_SMALL, end);
    await loader.rebuildRollups();
    const small = await phase(`${(SCALE_SMALL / 1000).toLocaleString('en')} thousand reports`);

    step(`loading up to ${SCALE_BIG.toLocaleString('en')} reports`);
    const rawS = await loader.growTo(SCALE_BIG, end, (n) => process.stderr.write(`\r  ${n.toLocaleString('en')} rows`));
    process.stderr.write('\n');
    step('rebuilding rollups');
    const rollS = await loader.rebuildRollups();
    const big = await phase(`${(SCALE_BIG / 1e6).toLocaleString('en')} million reports`);
    notes.push(
      `Loaded ${big.rows.toLocaleString('en')} raw reports (${opts.servers} servers x ${SCALE_SOURCES} sources, spread over 30 days, monthly partitions) in ${Math.round(rawS)} s with INSERT ... SELECT generate_series, and rebuilt the rollups from them in ${Math.round(rollS)} s.`,
      `The cache-miss row is ${opts.servers} sequential requests, one per server, each after the ${SCORE_CACHE_MS / 1000} s cache bound expired: one full score computation each. With 10 thousand reports a server's hourly grid (7 days + 3 hours x ${SCALE_SOURCES} sources) is mostly empty; with 10 million it is full, which is the most a computation ever reads.`,
    );
    return { scenarios: [MISS, TRUST, BOARD], small, big, notes };
  } finally {
    await loader?.close().catch(() => {});
    if (svc) await stopChild(svc);
    await db.drop().catch(() => {});
  }
}
