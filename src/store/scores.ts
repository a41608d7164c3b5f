import type { Queryable } from '../db/index.js';
import { settleRollups } from './rollup-aggregator.js';
import { groupByServer } from './by-server.js';
import { oneStatement, type Statement } from './one-statement.js';
import type { ServerRow } from './servers.js';

/** The cached current score of a server (last computation) and its hourly history. */
export interface ScoreRow {
  server_id: number;
  trust_score: number;
  verdict: string;
  anomaly_flags: string[];
  evidence_reports: number;
  computed_at: Date;
}

/** A tracked server joined with its cached score and plain totals (leaderboard, stats, tiers). */
export interface RankedServer {
  id: number;
  url: string;
  name: string;
  slug: string;
  category: string;
  registered_at: Date;
  trust_score: number | null;
  verdict: string | null;
  computed_at: Date | null;
  anomaly_flags: string[] | null;
  n: number;
  successes: number;
  latency_sum: number;
  last_at: Date | null;
}

/**
 * The servers without evidence, optionally of one category ($1) and containing a LIKE pattern ($2)
 * in name, slug or URL. The first LIKE is the expression of the trigram index (migration 1570):
 * implied by the exact per-column test after it, it lets a search read the index instead of the
 * servers table where pg_trgm is installed.
 */
export const SEARCH_TEXT_SQL = `(lower(s.name) || E'\\n' || s.slug || E'\\n' || lower(s.url))`;
const unratedWhere = `($1::text IS NULL OR s.category = $1) AND NOT EXISTS (SELECT 1 FROM server_totals t WHERE t.server_id = s.id AND t.n > 0)
          AND ($2::text IS NULL OR (${SEARCH_TEXT_SQL} LIKE $2 AND (lower(s.name) LIKE $2 OR s.slug LIKE $2 OR lower(s.url) LIKE $2)))`;

/**
 * A search's count of servers without evidence stops at this many (the pages say "10,000+"): a
 * text most servers contain ("github" in a registry of io.github.* names) would otherwise count
 * the whole table per request, index or not.
 */
export const SEARCH_COUNT_CAP = 10_000;

/** The count statement of a search over the servers without evidence, up to SEARCH_COUNT_CAP + 1 (unratedPage's total; EXPLAIN in tests). */
export function unratedCountStatement(category: string | null, like: string | null): [string, unknown[]] {
  return [`SELECT count(*)::int8 AS n FROM (SELECT 1 FROM servers s WHERE ${unratedWhere} LIMIT $3) m`, [category, like, SEARCH_COUNT_CAP + 1]];
}

/** A search text as the LIKE pattern unratedPage matches ('%text%', wildcards escaped). */
export const likePattern = (search: string) => `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export function scoreStore(db: Queryable) {
  return {
    /** Writes the current score and the snapshot of its hour (the latest computation in an hour wins). */
    async save(rows: readonly (ScoreRow & { bucket: Date })[]): Promise<void> {
      if (rows.length === 0) return;
      // One statement (writable CTE) for both: a lookup that computed a score pays one round trip.
      const current: Statement = [
        `INSERT INTO server_scores AS e (server_id, trust_score, verdict, anomaly_flags, evidence_reports, computed_at)
         SELECT u.id, u.s, u.v, u.f::text[], u.n, u.c
           FROM unnest($1::int8[], $2::float8[], $3::text[], $4::text[], $5::int8[], $6::timestamptz[]) AS u(id, s, v, f, n, c)
         ON CONFLICT (server_id) DO UPDATE SET trust_score = EXCLUDED.trust_score, verdict = EXCLUDED.verdict,
           anomaly_flags = EXCLUDED.anomaly_flags, evidence_reports = EXCLUDED.evidence_reports, computed_at = EXCLUDED.computed_at
         WHERE e.computed_at <= EXCLUDED.computed_at`,
        [
          rows.map((r) => r.server_id),
          rows.map((r) => r.trust_score),
          rows.map((r) => r.verdict),
          rows.map((r) => `{${r.anomaly_flags.join(',')}}`),
          rows.map((r) => r.evidence_reports),
          rows.map((r) => r.computed_at.toISOString()),
        ],
      ];
      const snapshot: Statement = [
        `INSERT INTO score_snapshots AS e (server_id, bucket, trust_score, verdict, computed_at)
         SELECT * FROM unnest($1::int8[], $2::timestamptz[], $3::float8[], $4::text[], $5::timestamptz[])
         ON CONFLICT (server_id, bucket) DO UPDATE SET trust_score = EXCLUDED.trust_score, verdict = EXCLUDED.verdict,
           computed_at = EXCLUDED.computed_at WHERE e.computed_at <= EXCLUDED.computed_at`,
        [
          rows.map((r) => r.server_id),
          rows.map((r) => r.bucket.toISOString()),
          rows.map((r) => r.trust_score),
          rows.map((r) => r.verdict),
          rows.map((r) => r.computed_at.toISOString()),
        ],
      ];
      const [sql, params] = oneStatement([current, snapshot]);
      await db.query(sql, params, { prepare: 'scores_save' });
    },

    async current(serverIds: readonly number[]): Promise<Map<number, ScoreRow>> {
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<ScoreRow>(
        `SELECT server_id, trust_score, verdict, anomaly_flags, evidence_reports, computed_at FROM server_scores WHERE server_id = ANY($1::int8[])`,
        [serverIds],
      );
      return new Map(rows.map((r) => [r.server_id, r]));
    },

    /**
     * Servers whose cached score is missing, computed before their latest report, or older than
     * `staleBefore` (time decay and anomaly windows move scores even without new reports).
     */
    async staleServerIds(staleBefore: Date): Promise<number[]> {
      await settleRollups(db);
      // Only servers with evidence: a server without reports is UNRATED whatever its stored row
      // says (ranked lists read n = 0 as unrated), and its score moves with nothing. At catalogue
      // scale (100,000 servers, most never reported on) recomputing those every
      // SCORE_MAX_AGE_MS was most of the work of every ranked read (issue 23). Driven from
      // server_totals, so the cost follows the servers with evidence, not the catalogue.
      const rows = await db.query<{ id: number }>(
        `SELECT t.server_id AS id FROM server_totals t LEFT JOIN server_scores c ON c.server_id = t.server_id
          WHERE t.n > 0 AND (c.server_id IS NULL OR c.computed_at < $1 OR c.evidence_reports <> t.n)`,
        [staleBefore.toISOString()],
      );
      return rows.map((r) => r.id);
    },

    /** The server rows of the given ids (the score refresh's batch input). */
    async serverRows(ids: readonly number[]): Promise<ServerRow[]> {
      if (ids.length === 0) return [];
      return db.query<ServerRow>('SELECT id, url, name, slug, category, registered_at FROM servers WHERE id = ANY($1::int8[]) ORDER BY id', [ids]);
    },

    /**
     * Every tracked server WITH EVIDENCE (optionally of one category) with its cached score and
     * totals, ranked. Servers without evidence (a catalogue's unobserved majority) are counted by
     * unratedCounts and paged by unratedPage instead of being read whole (issue 23).
     */
    async ranked(category: string | null): Promise<RankedServer[]> {
      await settleRollups(db);
      return db.query<RankedServer>(
        `SELECT s.id, s.url, s.name, s.slug, s.category, s.registered_at, c.trust_score, c.verdict, c.computed_at, c.anomaly_flags,
                t.n::int8 AS n, t.successes::int8 AS successes, t.latency_sum::float8 AS latency_sum, t.last_at
           FROM server_totals t JOIN servers s ON s.id = t.server_id LEFT JOIN server_scores c ON c.server_id = t.server_id
          WHERE t.n > 0 AND ($1::text IS NULL OR s.category = $1)
          ORDER BY c.trust_score DESC NULLS LAST, t.n DESC, s.url COLLATE "C"`,
        [category],
      );
    },

    /** Tracked servers without evidence per category (optionally one), with the newest registration time. */
    async unratedCounts(category: string | null): Promise<{ category: string; servers: number }[]> {
      const rows = await db.query<{ category: string; servers: number }>(
        `SELECT s.category, count(*)::int8 AS servers FROM servers s
          WHERE ($1::text IS NULL OR s.category = $1) AND NOT EXISTS (SELECT 1 FROM server_totals t WHERE t.server_id = s.id AND t.n > 0)
          GROUP BY s.category`,
        [category],
      );
      return rows.map((r) => ({ category: r.category, servers: Number(r.servers) }));
    },

    /** How many servers without evidence (optionally of one category) contain `search`, up to SEARCH_COUNT_CAP. */
    async unratedSearchCount(category: string | null, search: string): Promise<{ total: number; capped: boolean }> {
      const [row] = await db.query<{ n: number }>(...unratedCountStatement(category, likePattern(search)));
      const n = Number(row!.n);
      return n > SEARCH_COUNT_CAP ? { total: SEARCH_COUNT_CAP, capped: true } : { total: n, capped: false };
    },

    /**
     * One page of the servers without evidence, in URL order (code units), after `afterUrl`;
     * optionally of one category and containing `search` (lower case) in name, slug or URL.
     * `total` counts every match, up to SEARCH_COUNT_CAP (`capped`: there are more). RankedServer
     * rows with n = 0 and no score.
     */
    async unratedPage(o: { category: string | null; search: string | null; afterUrl: string | null; limit: number; knownTotal?: number }): Promise<{ rows: RankedServer[]; total: number; capped: boolean }> {
      const like = o.search === null ? null : likePattern(o.search);
      const where = unratedWhere;
      const [rows, [count]] = await Promise.all([
        db.query<RankedServer>(
          `SELECT s.id, s.url, s.name, s.slug, s.category, s.registered_at, NULL::float8 AS trust_score, NULL::text AS verdict, NULL::timestamptz AS computed_at,
                  NULL::text[] AS anomaly_flags, 0::int8 AS n, 0::int8 AS successes, 0::float8 AS latency_sum, NULL::timestamptz AS last_at
             FROM servers s WHERE ${where} AND ($3::text IS NULL OR s.url COLLATE "C" > $3::text COLLATE "C")
            ORDER BY s.url COLLATE "C" LIMIT $4`,
          [o.category, like, o.afterUrl, o.limit],
        ),
        // Without a search the caller knows the count (unratedCounts, kept with the ranked list).
        o.knownTotal !== undefined ? Promise.resolve([{ n: o.knownTotal }]) : db.query<{ n: number }>(...unratedCountStatement(o.category, like)),
      ]);
      const n = Number(count!.n);
      return o.knownTotal !== undefined || n <= SEARCH_COUNT_CAP ? { rows, total: n, capped: false } : { rows, total: SEARCH_COUNT_CAP, capped: true };
    },

    /** Servers without evidence registered after `since` (the trust delta's new servers): up to `limit` newest; `total` counts every server registered since, with evidence or not. */
    async unratedSince(since: Date, limit: number): Promise<{ rows: Pick<RankedServer, 'id' | 'url' | 'name' | 'category' | 'registered_at'>[]; total: number }> {
      const where = `s.registered_at > $1 AND NOT EXISTS (SELECT 1 FROM server_totals t WHERE t.server_id = s.id AND t.n > 0)`;
      const [rows, [count]] = await Promise.all([
        db.query<Pick<RankedServer, 'id' | 'url' | 'name' | 'category' | 'registered_at'>>(
          `SELECT s.id, s.url, s.name, s.category, s.registered_at FROM servers s WHERE ${where} ORDER BY s.registered_at DESC, s.id DESC LIMIT $2`,
          [since.toISOString(), limit],
        ),
        // Every server registered since (an index range count); the caller subtracts the ones with
        // evidence it holds in memory, cheaper than the anti-join over a fresh catalogue import.
        db.query<{ n: number }>(`SELECT count(*)::int8 AS n FROM servers s WHERE s.registered_at > $1`, [since.toISOString()]),
      ]);
      return { rows, total: Number(count!.n) };
    },

    /**
     * One page of every server registered after `since` (the trust delta's new servers, paged),
     * newest first: (registered_at, id) descending, after the key `after` (registered_at in
     * microseconds since the epoch, exact, and id). `us` is each row's key time.
     */
    async registeredSincePage(since: Date, after: { us: number; id: number } | null, limit: number): Promise<(Pick<RankedServer, 'id' | 'url' | 'name' | 'category' | 'registered_at'> & { us: number })[]> {
      const rows = await db.query<Pick<RankedServer, 'id' | 'url' | 'name' | 'category' | 'registered_at'> & { us: number }>(
        `SELECT s.id, s.url, s.name, s.category, s.registered_at, (extract(epoch FROM s.registered_at) * 1000000)::int8 AS us
           FROM servers s
          WHERE s.registered_at > $1 AND ($2::int8 IS NULL OR (s.registered_at, s.id) < (timestamptz 'epoch' + $2::int8 * interval '1 microsecond', $3::int8))
          ORDER BY s.registered_at DESC, s.id DESC LIMIT $4`,
        [since.toISOString(), after?.us ?? null, after?.id ?? null, limit],
      );
      return rows.map((r) => ({ ...r, id: Number(r.id), us: Number(r.us) }));
    },

    /** Hourly score snapshots of the given servers with from <= bucket <= to, oldest first. */
    async history(serverIds: readonly number[], from: Date, to: Date): Promise<Map<number, { bucket: Date; trust_score: number }[]>> {
      if (serverIds.length === 0) return new Map();
      const rows = await db.query<{ server_id: number; bucket: Date; trust_score: number }>(
        `SELECT server_id, bucket, trust_score FROM score_snapshots
          WHERE server_id = ANY($1::int8[]) AND bucket >= $2 AND bucket <= $3 ORDER BY server_id, bucket`,
        [serverIds, from.toISOString(), to.toISOString()],
      );
      return groupByServer(rows);
    },

    /** The last snapshot (within 30 days) of each server taken at or before `at`: the score at a window's start. */
    async snapshotsAt(at: Date): Promise<Map<number, number>> {
      const rows = await db.query<{ server_id: number; trust_score: number }>(
        `SELECT DISTINCT ON (server_id) server_id, trust_score FROM score_snapshots
          WHERE bucket <= $1 AND bucket > $1::timestamptz - interval '30 days' ORDER BY server_id, bucket DESC`,
        [at.toISOString()],
      );
      return new Map(rows.map((r) => [r.server_id, r.trust_score]));
    },
  };
}

export type ScoreStore = ReturnType<typeof scoreStore>;
