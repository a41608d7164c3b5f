import type { Queryable } from '../db/index.js';
import type { SourceHourRollup } from '../domain/anomaly.js';
import type { SourceAccumulator } from '../domain/scoring.js';
import { settleRollups } from './rollup-aggregator.js';
import type { ScoreRow } from './scores.js';
import type { StoredTotals } from './telemetry.js';

/** Everything the trust engine reads about one server to score it (see scoreInputs). */
export interface ScoreInputs {
  totals: StoredTotals | null;
  evidence: SourceAccumulator[];
  hourly: SourceHourRollup[];
  /** The score last written to server_scores (null: none). */
  stored: ScoreRow | null;
}

/** Per-source evidence as parallel arrays, ordered by source (array_agg in both statements). */
interface EvidenceArrays {
  e_source: string[] | null;
  e_weight: number[] | null;
  e_successes: number[] | null;
  e_latency: number[] | null;
  e_reports: number[] | null;
  e_at: Date[] | null;
}

interface InputRow extends EvidenceArrays {
  server_id: number;
  n: number | null;
  successes: number | null;
  latency_sum: number | null;
  n_5xx: number | null;
  hist: (number | string)[] | null;
  first_at: Date | null;
  last_at: Date | null;
  s_score: number | null;
  s_verdict: string | null;
  s_flags: string[] | null;
  s_reports: number | null;
  s_at: Date | null;
  h_bucket: Date[] | null;
  h_source: string[] | null;
  h_n: number[] | null;
  h_successes: number[] | null;
  h_latency: number[] | null;
  h_5xx: number[] | null;
}

/**
 * The trust engine's reads for a batch of servers in ONE statement (issue 23): totals, per-source
 * evidence, per-source hourly rollups with from <= bucket <= to, and the stored score. A lookup
 * that misses the score cache costs this one round trip instead of four statements; for a
 * tracked server without evidence (most of a public catalogue) each part is an index probe that
 * finds nothing. Evidence and hourly rows come back as parallel arrays (one aggregate per
 * server), in the order the separate reads returned them (source; bucket, source).
 */
export async function scoreInputs(db: Queryable, serverIds: readonly number[], from: Date, to: Date): Promise<Map<number, ScoreInputs>> {
  // Read-your-writes for these servers only: another server's pending report is no reason to wait.
  await settleRollups(db, serverIds);
  const out = new Map<number, ScoreInputs>();
  if (serverIds.length === 0) return out;
  const rows = await db.query<InputRow>(
    `SELECT u.id AS server_id,
            t.n, t.successes, t.latency_sum, t.n_5xx, t.hist, t.first_at, t.last_at,
            c.trust_score AS s_score, c.verdict AS s_verdict, c.anomaly_flags AS s_flags, c.evidence_reports AS s_reports, c.computed_at AS s_at,
            e.e_source, e.e_weight, e.e_successes, e.e_latency, e.e_reports, e.e_at,
            h.h_bucket, h.h_source, h.h_n, h.h_successes, h.h_latency, h.h_5xx
       FROM unnest($1::int8[]) AS u(id)
       LEFT JOIN server_totals t ON t.server_id = u.id
       LEFT JOIN server_scores c ON c.server_id = u.id
       CROSS JOIN LATERAL (
         SELECT array_agg(x.source ORDER BY x.source) AS e_source, array_agg(x.weight::float8 ORDER BY x.source) AS e_weight,
                array_agg(x.successes::float8 ORDER BY x.source) AS e_successes, array_agg(x.latency_sum::float8 ORDER BY x.source) AS e_latency,
                array_agg(x.reports::float8 ORDER BY x.source) AS e_reports, array_agg(x.updated_at ORDER BY x.source) AS e_at
           FROM trust_evidence x WHERE x.server_id = u.id) e
       CROSS JOIN LATERAL (
         SELECT array_agg(y.bucket ORDER BY y.bucket, y.source) AS h_bucket, array_agg(y.source ORDER BY y.bucket, y.source) AS h_source,
                array_agg(y.n::float8 ORDER BY y.bucket, y.source) AS h_n, array_agg(y.successes::float8 ORDER BY y.bucket, y.source) AS h_successes,
                array_agg(y.latency_sum::float8 ORDER BY y.bucket, y.source) AS h_latency, array_agg(y.n_5xx::float8 ORDER BY y.bucket, y.source) AS h_5xx
           FROM telemetry_hourly y WHERE y.server_id = u.id AND y.bucket >= $2 AND y.bucket <= $3) h`,
    [serverIds, from.toISOString(), to.toISOString()],
    // Every score computation runs it: planned once per connection, ~30% less database CPU per run.
    { prepare: 'score_inputs' },
  );
  for (const r of rows) {
    const totals: StoredTotals | null =
      r.n === null
        ? null
        : {
            server_id: r.server_id,
            n: r.n,
            successes: r.successes!,
            latency_sum: r.latency_sum!,
            n_5xx: r.n_5xx!,
            hist: r.hist!.map(Number),
            first_at: r.first_at!,
            last_at: r.last_at!,
          };
    const evidence = evidenceOf(r);
    const hourly: SourceHourRollup[] = (r.h_source ?? []).map((source, i) => ({
      bucket: new Date(r.h_bucket![i]!),
      source,
      n: Number(r.h_n![i]),
      successes: Number(r.h_successes![i]),
      latency_sum: Number(r.h_latency![i]),
      n_5xx: Number(r.h_5xx![i]),
    }));
    const stored: ScoreRow | null =
      r.s_score === null
        ? null
        : { server_id: r.server_id, trust_score: r.s_score, verdict: r.s_verdict!, anomaly_flags: r.s_flags ?? [], evidence_reports: r.s_reports!, computed_at: r.s_at! };
    out.set(r.server_id, { totals, evidence, hourly, stored });
  }
  return out;
}

/** Per-source evidence from the parallel arrays both statements return (`e_*`, ordered by source). */
function evidenceOf(r: EvidenceArrays): SourceAccumulator[] {
  return (r.e_source ?? []).map((source, i) => ({
    source,
    weight: Number(r.e_weight![i]),
    successes: Number(r.e_successes![i]),
    latency_sum: Number(r.e_latency![i]),
    reports: Number(r.e_reports![i]),
    updated_at: new Date(r.e_at![i]!),
  }));
}

/** A server with evidence of a category, as its category's baseline reads it. */
export interface CategoryMember {
  totals: StoredTotals;
  evidence: SourceAccumulator[];
}

interface MemberRow extends StoredTotals, EvidenceArrays {
  category: string;
}

/**
 * The servers with evidence of the given categories, with their totals and per-source evidence,
 * in ONE statement (was two per category): every category's baseline expires together, so the
 * misses that follow ask for most of them in the same event-loop turn (issue 23).
 */
export async function categoryMembers(db: Queryable, categories: readonly string[]): Promise<Map<string, CategoryMember[]>> {
  await settleRollups(db);
  const out = new Map<string, CategoryMember[]>(categories.map((c) => [c, []]));
  if (categories.length === 0) return out;
  const rows = await db.query<MemberRow>(
    `SELECT s.category, t.server_id, t.n, t.successes, t.latency_sum, t.n_5xx, t.hist, t.first_at, t.last_at,
            e.e_source, e.e_weight, e.e_successes, e.e_latency, e.e_reports, e.e_at
       FROM server_totals t JOIN servers s ON s.id = t.server_id
       CROSS JOIN LATERAL (
         SELECT array_agg(x.source ORDER BY x.source) AS e_source, array_agg(x.weight::float8 ORDER BY x.source) AS e_weight,
                array_agg(x.successes::float8 ORDER BY x.source) AS e_successes, array_agg(x.latency_sum::float8 ORDER BY x.source) AS e_latency,
                array_agg(x.reports::float8 ORDER BY x.source) AS e_reports, array_agg(x.updated_at ORDER BY x.source) AS e_at
           FROM trust_evidence x WHERE x.server_id = t.server_id) e
      WHERE s.category = ANY($1::text[])`,
    [categories],
  );
  for (const r of rows) {
    const evidence = evidenceOf(r);
    const totals: StoredTotals = {
      server_id: r.server_id,
      n: r.n,
      successes: r.successes,
      latency_sum: r.latency_sum,
      n_5xx: r.n_5xx,
      hist: r.hist.map(Number),
      first_at: r.first_at,
      last_at: r.last_at,
    };
    out.get(r.category)?.push({ totals, evidence });
  }
  return out;
}
