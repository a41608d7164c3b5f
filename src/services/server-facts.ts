// What a lookup shows about a tracked server besides its score (issue 23): the drift flag, the
// MCP probe's view (protocol, Server Card) and the MCP Registry listing. Each is remembered for
// SCORE_CACHE_MS by its own module (drift.ts, mcp-probe.ts, registry-sync.ts), which also forgets
// it when this process changes it. What is not remembered is read here in ONE statement for all
// three (and for every server missed in the same event-loop turn), instead of one each, then
// remembered by those modules: at catalogue scale most lookups are of servers nobody read in the
// last SCORE_CACHE_MS, and most of those have no drift, no probe facts and no listing. A lookup of
// a server by URL that misses reads them in its own statement (lookupUrlWithFacts).
import { DRIFT_FLAG, driftFlagActive } from '../domain/drift.js';
import type { Queryable } from '../db/index.js';
import type { McpFactsRow } from '../store/mcp-facts.js';
import { cachedListing, rememberListing, type RegistryListingRow } from '../store/registry-sync.js';
import { canonicalServerUrl, hasQuery, InvalidServerUrl, looksLikeUrl } from '../domain/server-identity.js';
import { serverStore, type ServerRow } from '../store/servers.js';
import { perTurn } from '../store/per-turn.js';
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

/** The columns of a server's side facts, for a query with `servers s` and `mcp_server_facts f` joined on the server `id`. */
const factsColumns = (id: string) => `(SELECT max(d.recorded_at) FROM drift_baselines d WHERE d.server_id = ${id} AND d.drift_detected) AS drift_at,
            s.registry_name, s.registry_status, s.registry_status_message, s.registry_status_changed_at, s.registry_updated_at,
            f.server_id AS f_server_id, f.probed_at, f.protocol_version, f.era, f.transport, f.server_name, f.server_version, f.supported_versions,
            f.card_url, f.card_claims, f.card_fetched_at, f.card_differences, f.card_checked_at`;

function rawOf(r: FactsRow): Raw {
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
  return { drift: r.drift_at, mcp, listing };
}

/** Remembers what one statement read (started at `start`, drift token taken before it) in the modules that own each part. */
function remember(db: Queryable, id: number, f: Raw, token: number, start: number): void {
  rememberDriftAt(db, id, token, f.drift);
  rememberMcpFacts(db, id, f.mcp, start);
  rememberListing(db, id, f.listing, start);
}

/** The three reads of drift.ts, mcp-facts.ts and registry-sync.ts for a batch of servers, as one statement. */
async function readFacts(db: Queryable, ids: readonly number[]): Promise<Map<number, Raw>> {
  const rows = await db.query<FactsRow>(
    `SELECT u.id AS server_id, ${factsColumns('u.id')}
       FROM unnest($1::int8[]) AS u(id)
       LEFT JOIN servers s ON s.id = u.id
       LEFT JOIN mcp_server_facts f ON f.server_id = u.id`,
    [ids],
    { prepare: 'server_facts' },
  );
  return new Map(rows.map((r) => [r.server_id, rawOf(r)]));
}

/**
 * Servers by canonical URL (no query) with their side facts, remembered as read: the URLs asked
 * in one event-loop turn in one statement (src/store/per-turn.ts), so that a flood of look-ups of
 * URLs nobody tracks, each a miss no cache can hold, costs the database one statement per turn.
 */
const byUrlsWithFacts = perTurn(async (db: Queryable, urls: string[]): Promise<Map<string, ServerRow>> => {
  // Taken before the read: a drift recorded by this process meanwhile keeps the read out of memory.
  const token = driftReadToken(db);
  const start = performance.now();
  const rows = await db.query<FactsRow & ServerRow>(
    `SELECT s.id AS server_id, s.id, s.url, s.name, s.slug, s.category, s.registered_at, ${factsColumns('s.id')}
       FROM servers s LEFT JOIN mcp_server_facts f ON f.server_id = s.id
      WHERE s.url = ANY($1::text[])`,
    [urls],
    { prepare: 'servers_by_url_facts' },
  );
  const found = new Map<string, ServerRow>();
  for (const r of rows) {
    remember(db, r.id, rawOf(r), token, start);
    found.set(r.url, { id: r.id, url: r.url, name: r.name, slug: r.slug, category: r.category, registered_at: r.registered_at });
  }
  return found;
});

/**
 * servers.lookupUrl of a canonical URL, with the found server's side facts read in the same
 * statement and remembered (a lookup that misses the remembered rows is, at catalogue scale,
 * nearly always followed by a read of them). A URL with a query keeps the plain lookup.
 */
export async function lookupUrlWithFacts(db: Queryable, url: string): Promise<ServerRow | null> {
  if (hasQuery(url)) return serverStore(db).lookupUrl(url);
  return (await byUrlsWithFacts(db, url)) ?? null;
}

/** servers.resolve (a URL, registry name, name or slug) with lookupUrlWithFacts for a URL. */
export async function resolveWithFacts(db: Queryable, target: string): Promise<ServerRow | null> {
  const t = target.trim();
  if (!looksLikeUrl(t)) return serverStore(db).resolve(t);
  let url: string;
  try {
    url = canonicalServerUrl(t);
  } catch (err) {
    if (err instanceof InvalidServerUrl) return null;
    throw err;
  }
  return lookupUrlWithFacts(db, url);
}

const NONE: Raw = { drift: null, mcp: null, listing: null };

// Misses of one database handle in the same event-loop turn share one statement.
const readSoon = perTurn(async (db: Queryable, ids: number[]): Promise<Map<number, Raw>> => {
  // Taken before the read: a drift recorded by this process meanwhile keeps the read out of memory.
  const token = driftReadToken(db);
  const start = performance.now();
  const facts = await readFacts(db, ids);
  for (const i of ids) remember(db, i, facts.get(i) ?? NONE, token, start);
  return facts;
});

/** A tracked server's drift flags, MCP view and listing as of `now`: from memory when fresh, else one statement (shared by concurrent misses). */
export async function serverFacts(db: Queryable, serverId: number, now: Date): Promise<ServerFacts> {
  const d = cachedDriftAt(db, serverId);
  const m = cachedMcpFacts(db, serverId);
  const l = cachedListing(db, serverId, SCORE_CACHE_MS);
  const raw: Raw = d && m && l ? { drift: d.at, mcp: m.row, listing: l.row } : ((await readSoon(db, serverId)) ?? NONE);
  // What was remembered stays the answer for its part (a probe or drift check of this process may be newer than this read).
  const drift = d ? d.at : raw.drift;
  const mcp = m ? m.row : raw.mcp;
  const listing = l ? l.row : raw.listing;
  return { driftFlags: driftFlagActive(drift, now) ? [DRIFT_FLAG] : [], mcp: mcpViewOf(mcp, now), listing };
}
