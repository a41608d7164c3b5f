import type { Queryable } from '../db/index.js';
import type { CardClaims, CardDifference } from '../domain/server-card.js';

/** A server's latest MCP probe facts (table mcp_server_facts). */
export interface McpFactsRow {
  server_id: number;
  probed_at: Date;
  protocol_version: string;
  era: 'modern' | 'legacy';
  transport: 'streamable-http' | 'sse';
  server_name: string | null;
  server_version: string | null;
  supported_versions: string[] | null;
  card_url: string | null;
  card_claims: CardClaims | null;
  card_fetched_at: Date | null;
  /** null: no card found; []: the card matches runtime. */
  card_differences: CardDifference[] | null;
  card_checked_at: Date | null;
}

const COLUMNS =
  'server_id, probed_at, protocol_version, era, transport, server_name, server_version, supported_versions, card_url, card_claims, card_fetched_at, card_differences, card_checked_at';

const json = (v: unknown) => (v === null || v === undefined ? null : JSON.stringify(v));

export function mcpFactsStore(db: Queryable) {
  return {
    async get(serverId: number): Promise<McpFactsRow | null> {
      const rows = await db.query<McpFactsRow>(`SELECT ${COLUMNS} FROM mcp_server_facts WHERE server_id = $1`, [serverId]);
      return rows[0] ?? null;
    },

    /** Replaces the server's facts with those of the probe that just succeeded. */
    async put(f: McpFactsRow): Promise<void> {
      await db.query(
        `INSERT INTO mcp_server_facts (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (server_id) DO UPDATE SET
           probed_at = EXCLUDED.probed_at, protocol_version = EXCLUDED.protocol_version, era = EXCLUDED.era, transport = EXCLUDED.transport,
           server_name = EXCLUDED.server_name, server_version = EXCLUDED.server_version, supported_versions = EXCLUDED.supported_versions,
           card_url = EXCLUDED.card_url, card_claims = EXCLUDED.card_claims, card_fetched_at = EXCLUDED.card_fetched_at,
           card_differences = EXCLUDED.card_differences, card_checked_at = EXCLUDED.card_checked_at`,
        [
          f.server_id,
          f.probed_at,
          f.protocol_version,
          f.era,
          f.transport,
          f.server_name,
          f.server_version,
          json(f.supported_versions),
          f.card_url,
          json(f.card_claims),
          f.card_fetched_at,
          json(f.card_differences),
          f.card_checked_at,
        ],
      );
    },

    /** Servers whose latest card check (at or after `since`) found differences, newest first, with their identity. */
    async cardMismatches(since: Date, limit: number): Promise<(McpFactsRow & { url: string; name: string; slug: string })[]> {
      return db.query(
        `SELECT f.server_id, f.probed_at, f.protocol_version, f.era, f.transport, f.server_name, f.server_version, f.supported_versions,
                f.card_url, f.card_claims, f.card_fetched_at, f.card_differences, f.card_checked_at, s.url, s.name, s.slug
           FROM mcp_server_facts f JOIN servers s ON s.id = f.server_id
          WHERE f.card_checked_at >= $1 AND jsonb_array_length(COALESCE(f.card_differences, '[]'::jsonb)) > 0
          ORDER BY f.card_checked_at DESC LIMIT $2`,
        [since, limit],
      );
    },
  };
}
