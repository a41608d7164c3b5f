import type { Queryable } from '../db/index.js';
import type { ManifestDiff, ToolHashes } from '../domain/drift.js';

export interface DriftBaselineRow {
  baseline_id: string;
  server_id: number;
  recorded_at: Date;
  manifest_hash: string;
  tool_count: number;
  tools: ToolHashes[];
  previous_baseline_id: string | null;
  drift_detected: boolean;
  changes: ManifestDiff;
  receipt_id: string;
}

const COLUMNS = 'baseline_id, server_id, recorded_at, manifest_hash, tool_count, tools, previous_baseline_id, drift_detected, changes, receipt_id';

export function driftStore(db: Queryable) {
  return {
    /** Serialises baselining of one server inside a transaction (row lock on the server). */
    async lockServer(serverId: number): Promise<void> {
      await db.query('SELECT id FROM servers WHERE id = $1 FOR UPDATE', [serverId]);
    },

    async latest(serverId: number): Promise<DriftBaselineRow | null> {
      const rows = await db.query<DriftBaselineRow>(
        `SELECT ${COLUMNS} FROM drift_baselines WHERE server_id = $1 ORDER BY recorded_at DESC, seq DESC LIMIT 1`,
        [serverId],
      );
      return rows[0] ?? null;
    },

    async insert(r: DriftBaselineRow): Promise<void> {
      await db.query(
        `INSERT INTO drift_baselines (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [r.baseline_id, r.server_id, r.recorded_at, r.manifest_hash, r.tool_count, JSON.stringify(r.tools), r.previous_baseline_id, r.drift_detected, JSON.stringify(r.changes), r.receipt_id],
      );
    },

    /** Stores part texts by hash (ON CONFLICT DO NOTHING: the same hash is always the same text). */
    async saveTexts(texts: Map<string, string>, at: Date): Promise<void> {
      if (texts.size === 0) return;
      const hashes = [...texts.keys()];
      await db.query(
        `INSERT INTO drift_part_texts (hash, canonical, first_seen_at)
         SELECT h, c, $3 FROM unnest($1::text[], $2::text[]) AS t(h, c) ORDER BY h ON CONFLICT (hash) DO NOTHING`,
        [hashes, hashes.map((h) => texts.get(h)!), at],
      );
    },

    /** The stored canonical texts of these part hashes (unknown hashes are absent). */
    async texts(hashes: string[]): Promise<Map<string, string>> {
      if (hashes.length === 0) return new Map();
      const rows = await db.query<{ hash: string; canonical: string }>('SELECT hash, canonical FROM drift_part_texts WHERE hash = ANY($1::text[])', [[...new Set(hashes)]]);
      return new Map(rows.map((r) => [r.hash, r.canonical]));
    },

    /** Time of the most recent baseline that detected drift, or null. */
    async lastDriftAt(serverId: number): Promise<Date | null> {
      const rows = await db.query<{ at: Date | null }>('SELECT max(recorded_at) AS at FROM drift_baselines WHERE server_id = $1 AND drift_detected', [serverId]);
      return rows[0]?.at ?? null;
    },

    /** What each baseline of a server that detected drift at or after `since` changed, newest first (per-tool gate). */
    async driftChangesSince(serverId: number, since: Date): Promise<{ recorded_at: Date; changes: ManifestDiff }[]> {
      return db.query<{ recorded_at: Date; changes: ManifestDiff }>(
        'SELECT recorded_at, changes FROM drift_baselines WHERE server_id = $1 AND drift_detected AND recorded_at >= $2 ORDER BY recorded_at DESC, seq DESC LIMIT 1000',
        [serverId, since],
      );
    },

    /** Servers with a drift detected at or after `since`, with the time of their latest one. */
    async driftedSince(since: Date): Promise<Map<number, Date>> {
      const rows = await db.query<{ server_id: number; at: Date }>(
        'SELECT server_id, max(recorded_at) AS at FROM drift_baselines WHERE drift_detected AND recorded_at >= $1 GROUP BY server_id',
        [since],
      );
      return new Map(rows.map((r) => [Number(r.server_id), r.at]));
    },

    /** Detected drifts of a server within [from, to) (compliance exports). */
    async driftsBetween(serverId: number, from: Date, to: Date): Promise<DriftBaselineRow[]> {
      return db.query<DriftBaselineRow>(
        `SELECT ${COLUMNS} FROM drift_baselines WHERE server_id = $1 AND drift_detected AND recorded_at >= $2 AND recorded_at < $3 ORDER BY recorded_at`,
        [serverId, from, to],
      );
    },

    /**
     * The newest baselines that detected drift (at most one per server: its latest drift), with
     * the previous baseline's tool hashes and time, newest first; plus the server's identity.
     */
    async recentDrifts(limit: number): Promise<(DriftBaselineRow & { url: string; name: string; slug: string; prev_tools: ToolHashes[] | null; prev_recorded_at: Date | null })[]> {
      return db.query(
        `SELECT * FROM (
           SELECT DISTINCT ON (d.server_id) ${COLUMNS.split(', ').map((c) => `d.${c}`).join(', ')}, s.url, s.name, s.slug,
                  p.tools AS prev_tools, p.recorded_at AS prev_recorded_at
             FROM drift_baselines d JOIN servers s ON s.id = d.server_id
             LEFT JOIN drift_baselines p ON p.baseline_id = d.previous_baseline_id
            WHERE d.drift_detected ORDER BY d.server_id, d.recorded_at DESC, d.seq DESC) x
          ORDER BY recorded_at DESC LIMIT $1`,
        [limit],
      );
    },

    /** Every server's latest baseline (drifted or not), newest first, with the server's identity. */
    async latestBaselines(limit: number): Promise<(DriftBaselineRow & { url: string; name: string; slug: string })[]> {
      return db.query(
        `SELECT * FROM (
           SELECT DISTINCT ON (d.server_id) ${COLUMNS.split(', ').map((c) => `d.${c}`).join(', ')}, s.url, s.name, s.slug
             FROM drift_baselines d JOIN servers s ON s.id = d.server_id ORDER BY d.server_id, d.recorded_at DESC, d.seq DESC) x
          ORDER BY recorded_at DESC LIMIT $1`,
        [limit],
      );
    },
  };
}

export type DriftStore = ReturnType<typeof driftStore>;
