// What a lookup shows about a tracked server besides its score (issue 23): the drift flag, the
// MCP probe's view (protocol, Server Card) and the MCP Registry listing. Each is remembered for
// SCORE_CACHE_MS by its own module (drift.ts, mcp-probe.ts, registry-sync.ts), which also forgets
// it when this process changes it. What is not remembered is read here in ONE statement for all
// three (and for every server missed in the same event-loop turn), instead of one each, then
// remembered by those modules: at catalogue scale most lookups are of servers nobody read in the
// last SCORE_CACHE_MS, and most of those have no drift, no probe facts and no listing.
import { DRIFT_FLAG, driftFlagActive } from '../domain/drift.js';
import type { Queryable } from '../db/index.js';
import type { McpFactsRow } from '../store/mcp-facts.js';
import { cachedListing, rememberListing, type RegistryListingRow } from '../store/registry-sync.js';
import { cachedDriftAt, driftReadToken, rememberDriftAt } from './drift.js';
import { cachedMcpFacts, mcpViewOf, rememberMcpFacts, type McpTrustView } from './mcp-probe.js';
import { SCORE_CACHE_MS } from './trust-engine.js';

export interface ServerFacts {
  /** Active drift flags ([DRIFT_FLAG] or []), as toolManifestDriftFlags gives them. */
  driftFlags: string[];
  /** As mcpTrustView gives it (the same object while nothing changed). */
  mcp: McpTrustView | null;
  listing: RegistryListingRow | null;
}

interface Raw {
  drift: Date | null;
  mcp: McpFactsRow | null;
  listing: RegistryListingRow | null;
}

interface FactsRow {
  server_id: number;
  drift_at: Date | null;
  registry_name: string | null;
  registry_status: RegistryListingRow['registry_status'] | null;
  registry_status_message: string | null;
  registry_status_changed_at: Date | null;
  registry_updated_at: Date | null;
  f_server_id: number | null;
  probed_at: Date;
  protocol_version: string;
  era: McpFactsRow['era'];
  transport: McpFactsRow['transport'];
  server_name: string | null;
  server_version: string | null;
  supported_versions: string[] | null;
  card_url: string | null;
  card_claims: McpFactsRow['card_claims'];
  card_fetched_at: Date | null;
  card_differences: McpFactsRow['card_differences'];
  card_checked_at: Date | null;
}

/** The three reads of drift.ts, mcp-facts.ts and registry-sync.ts for a batch of servers, as one statement. */
async function readFacts(db: Queryable, ids: readonly number[]): Promise<Map<number, Raw>> {
  const rows = await db.query<FactsRow>(
    `SELECT u.id AS server_id,
            (SELECT max(d.recorded_at) FROM drift_baselines d WHERE d.server_id = u.id AND d.drift_detected) AS drift_at,
            s.registry_name, s.registry_status, s.registry_status_message, s.registry_status_changed_at, s.registry_updated_at,
            f.server_id AS f_server_id, f.probed_at, f.protocol_version, f.era, f.transport, f.server_name, f.server_version, f.supported_versions,
            f.card_url, f.card_claims, f.card_fetched_at, f.card_differences, f.card_checked_at
       FROM unnest($1::int8[]) AS u(id)
       LEFT JOIN servers s ON s.id = u.id
       LEFT JOIN mcp_server_facts f ON f.server_id = u.id`,
    [ids],
  );
  const out = new Map<number, Raw>();
  for (const r of rows) {
    const listing: RegistryListingRow | null =
      r.registry_name !== null && r.registry_status !== null
        ? {
            registry_name: r.registry_name,
            registry_status: r.registry_status,
            registry_status_message: r.registry_status_message,
            registry_status_changed_at: r.registry_status_changed_at,
            registry_updated_at: r.registry_updated_at,
          }
        : null;
    const mcp: McpFactsRow | null =
      r.f_server_id === null
        ? null
        : {
            server_id: r.f_server_id,
            probed_at: r.probed_at,
            protocol_version: r.protocol_version,
            era: r.era,
            transport: r.transport,
            server_name: r.server_name,
            server_version: r.server_version,
            supported_versions: r.supported_versions,
            card_url: r.card_url,
            card_claims: r.card_claims,
            card_fetched_at: r.card_fetched_at,
            card_differences: r.card_differences,
            card_checked_at: r.card_checked_at,
          };
    out.set(r.server_id, { drift: r.drift_at, mcp, listing });
  }
  return out;
}

// Misses of one database handle in the same event-loop turn share one statement.
const batches = new WeakMap<Queryable, { ids: Set<number>; result: Promise<Map<number, Raw>> }>();
const NONE: Raw = { drift: null, mcp: null, listing: null };

function readSoon(db: Queryable, id: number): Promise<Raw> {
  let b = batches.get(db);
  if (!b) {
    const ids = new Set<number>();
    const result = new Promise<void>((resolve) => setImmediate(resolve)).then(async () => {
      if (batches.get(db)?.ids === ids) batches.delete(db);
      const list = [...ids];
      // Taken before the read: a drift recorded by this process meanwhile keeps the read out of memory.
      const tokens = list.map((i) => driftReadToken(db, i));
      const start = performance.now();
      const facts = await readFacts(db, list);
      list.forEach((i, k) => {
        const f = facts.get(i) ?? NONE;
        rememberDriftAt(db, i, tokens[k]!, f.drift);
        rememberMcpFacts(db, i, f.mcp, start);
        rememberListing(db, i, f.listing, start);
      });
      return facts;
    });
    b = { ids, result };
    batches.set(db, b);
  }
  b.ids.add(id);
  return b.result.then((m) => m.get(id) ?? NONE);
}

/** A tracked server's drift flags, MCP view and listing as of `now`: from memory when fresh, else one statement (shared by concurrent misses). */
export async function serverFacts(db: Queryable, serverId: number, now: Date): Promise<ServerFacts> {
  const d = cachedDriftAt(db, serverId);
  const m = cachedMcpFacts(db, serverId);
  const l = cachedListing(db, serverId, SCORE_CACHE_MS);
  const raw: Raw = d && m && l ? { drift: d.at, mcp: m.row, listing: l.row } : await readSoon(db, serverId);
  // What was remembered stays the answer for its part (a probe or drift check of this process may be newer than this read).
  const drift = d ? d.at : raw.drift;
  const mcp = m ? m.row : raw.mcp;
  const listing = l ? l.row : raw.listing;
  return { driftFlags: driftFlagActive(drift, now) ? [DRIFT_FLAG] : [], mcp: mcpViewOf(mcp, now), listing };
}
