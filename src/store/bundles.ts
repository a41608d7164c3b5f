import type { Queryable } from '../db/index.js';
import type { BundleSourceRow } from '../domain/bundle.js';

/** A remembered bundle state (table bundle_states): what `?since=` deltas are worked out against. */
export interface BundleStateRow {
  bundle_id: string;
  filter_key: string;
  first_issued_at: Date;
  last_issued_at: Date;
  server_count: number;
  /** gzip(JSON [[url, digest], ...]). */
  digests: Buffer;
}

export function bundleStore(db: Queryable) {
  return {
    /**
     * Every tracked server with what a bundle states about it, in one statement, from the cached
     * scores (server_scores), the running totals (server_totals), the latest tool-manifest
     * baseline, the last detected drift, the Server Card check and the 30-day report count.
     * Nothing is computed per server here: the scores are the ones the trust engine cached.
     */
    async rows(since30d: Date): Promise<BundleSourceRow[]> {
      return db.query<BundleSourceRow>(
        `SELECT s.url, s.name, s.slug, s.category,
                c.trust_score, c.verdict, c.anomaly_flags, c.computed_at,
                coalesce(t.n, 0)::int8 AS n, t.last_at,
                b.manifest_hash, d.last_drift_at,
                CASE WHEN f.card_differences IS NOT NULL AND jsonb_typeof(f.card_differences) = 'array'
                          AND jsonb_array_length(f.card_differences) > 0 THEN f.card_checked_at END AS card_mismatch_at,
                coalesce(h.n, 0)::int8 AS interactions_30d
           FROM servers s
           LEFT JOIN server_scores c ON c.server_id = s.id
           LEFT JOIN server_totals t ON t.server_id = s.id
           LEFT JOIN (SELECT DISTINCT ON (server_id) server_id, manifest_hash FROM drift_baselines
                       ORDER BY server_id, recorded_at DESC, seq DESC) b ON b.server_id = s.id
           LEFT JOIN (SELECT server_id, max(recorded_at) AS last_drift_at FROM drift_baselines WHERE drift_detected GROUP BY server_id) d
                  ON d.server_id = s.id
           LEFT JOIN mcp_server_facts f ON f.server_id = s.id
           LEFT JOIN (SELECT server_id, sum(n) AS n FROM telemetry_hourly WHERE bucket >= $1 GROUP BY server_id) h ON h.server_id = s.id
          ORDER BY s.url`,
        [since30d.toISOString()],
        // Every server: seconds at 100,000 on a loaded host (docs/bundles.md), past the ordinary statement bound.
        { longRunning: true },
      );
    },

    /** Remembers a state (or, when it is known, that it was issued again at `at`). */
    async remember(r: Omit<BundleStateRow, 'first_issued_at' | 'last_issued_at'>, at: Date): Promise<void> {
      await db.query(
        `INSERT INTO bundle_states (bundle_id, filter_key, first_issued_at, last_issued_at, server_count, digests)
         VALUES ($1, $2, $3, $3, $4, $5)
         ON CONFLICT (bundle_id) DO UPDATE SET last_issued_at = greatest(bundle_states.last_issued_at, EXCLUDED.last_issued_at)`,
        [r.bundle_id, r.filter_key, at.toISOString(), r.server_count, r.digests],
      );
    },

    async get(bundleId: string): Promise<BundleStateRow | null> {
      const rows = await db.query<BundleStateRow & { digests: Uint8Array }>(
        'SELECT bundle_id, filter_key, first_issued_at, last_issued_at, server_count, digests FROM bundle_states WHERE bundle_id = $1',
        [bundleId],
      );
      const r = rows[0];
      return r ? { ...r, digests: Buffer.from(r.digests) } : null;
    },

    /** Forgets states last issued before `before`; returns how many. */
    async prune(before: Date): Promise<number> {
      const rows = await db.query<{ bundle_id: string }>('DELETE FROM bundle_states WHERE last_issued_at < $1 RETURNING bundle_id', [before.toISOString()]);
      return rows.length;
    },
  };
}

export type BundleStore = ReturnType<typeof bundleStore>;
