import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ServerCardCheckSchema } from '../../gen/observatory/v1/common_pb.js';
import type { Queryable } from '../db/index.js';
import { DRIFT_FLAG_WINDOW_MS } from '../domain/drift.js';
import { compareServerCard, SERVER_CARD_FLAG, type CardClaims } from '../domain/server-card.js';
import { readToolManifest, type LiveManifest, type McpTransportKind } from '../probes/mcp-manifest.js';
import { createSafeFetcher, ProbeFailed, type SafeFetcher } from '../probes/safe-fetch.js';
import { findServerCard } from '../probes/server-card.js';
import { mcpFactsStore, type McpFactsRow } from '../store/mcp-facts.js';
import type { ServiceDeps } from './context.js';
import { SCORE_CACHE_MS } from './trust-engine.js';
import { BoundedMap } from '../store/cache-limits.js';

// The MCP probe as a service (docs/probes.md "The MCP probe", "Server Cards"): drift checks and
// active observation read a server through it; it records what the server spoke (protocol
// revision, era, transport, server info) and how its Server Card compares with that, and the
// trust record, pre-flight and /drift show it. A card is a claim: a mismatch raises the
// server_card_mismatch flag and changes no score.

/** A card found (or found missing) is fetched again after this long by observation; GET /api/drift always refetches. */
export const CARD_REFRESH_MS = 3600_000;
/** A mismatch stays an active anomaly this long after the check that found it (as drift does). */
export const CARD_FLAG_WINDOW_MS = DRIFT_FLAG_WINDOW_MS;

export type ServerCardCheck = MessageInitShape<typeof ServerCardCheckSchema>;

/** What the trust record, pre-flight and /drift show about a server's MCP side. */
export interface McpTrustView {
  protocolVersion: string;
  era: 'modern' | 'legacy';
  transport: 'streamable-http' | 'sse';
  probedAt: Date;
  /** null when the server publishes no card we could read. */
  serverCard: ServerCardCheck | null;
  /** [SERVER_CARD_FLAG] while a recent check found differences, else []. */
  flags: string[];
}

// Per database handle, like the drift flags: every trust read needs it, probes change it. An entry
// lives SCORE_CACHE_MS; a probe in this process replaces it at once (the bound covers other instances).
const memos = new WeakMap<Queryable, Map<number, { row: McpFactsRow | null; mono: number }>>();

function memo(db: Queryable) {
  let m = memos.get(db);
  if (!m) memos.set(db, (m = new BoundedMap()));
  return m;
}

async function factsOf(db: Queryable, serverId: number): Promise<McpFactsRow | null> {
  const m = memo(db);
  const hit = m.get(serverId);
  if (hit && performance.now() - hit.mono < SCORE_CACHE_MS) return hit.row;
  const row = await mcpFactsStore(db).get(serverId);
  m.set(serverId, { row, mono: performance.now() });
  return row;
}

/** The remembered MCP facts of a server (`row` null: never probed), when read less than SCORE_CACHE_MS ago. */
export function cachedMcpFacts(db: Queryable, serverId: number): { row: McpFactsRow | null } | undefined {
  const hit = memo(db).get(serverId);
  return hit && performance.now() - hit.mono < SCORE_CACHE_MS ? hit : undefined;
}

/** Remembers facts read at `readStart` (performance.now()), unless a newer read or a probe of this process is remembered. */
export function rememberMcpFacts(db: Queryable, serverId: number, row: McpFactsRow | null, readStart: number): void {
  const m = memo(db);
  const hit = m.get(serverId);
  if (hit && hit.mono > readStart) return;
  m.set(serverId, { row, mono: readStart });
}

/** The MCP trust view of facts (see mcpTrustView); null without facts. */
export function mcpViewOf(f: McpFactsRow | null, now: Date): McpTrustView | null {
  return f ? viewOf(f, now) : null;
}

const views = new WeakMap<McpFactsRow, McpTrustView>();

/** The server card check as the API shows it (ServerCardCheck); null when no card was found. */
export function serverCardCheckOf(f: Pick<McpFactsRow, 'card_url' | 'card_differences' | 'card_checked_at'>): ServerCardCheck | null {
  if (f.card_url === null || f.card_differences === null || f.card_checked_at === null) return null;
  return { cardUrl: f.card_url, checkedAt: f.card_checked_at.toISOString(), matches: f.card_differences.length === 0, differences: f.card_differences.map((d) => ({ ...d })) };
}

function viewOf(f: McpFactsRow, now: Date): McpTrustView {
  const active = f.card_differences !== null && f.card_differences.length > 0 && f.card_checked_at !== null && now.getTime() - f.card_checked_at.getTime() <= CARD_FLAG_WINDOW_MS;
  const cached = views.get(f);
  if (cached && cached.flags.length === (active ? 1 : 0)) return cached;
  const v: McpTrustView = { protocolVersion: f.protocol_version, era: f.era, transport: f.transport, probedAt: f.probed_at, serverCard: serverCardCheckOf(f), flags: active ? [SERVER_CARD_FLAG] : [] };
  views.set(f, v);
  return v;
}

/**
 * The MCP side of a tracked server's trust record: null when no probe has succeeded yet. The
 * same object is returned while nothing changed (callers may cache responses by it).
 */
export async function mcpTrustView(db: Queryable, serverId: number, now: Date): Promise<McpTrustView | null> {
  const f = await factsOf(db, serverId);
  return f ? viewOf(f, now) : null;
}

export interface McpProbeOptions {
  transport?: McpTransportKind;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Reuse a card fetched (or found missing) less than this long ago; default: always fetch. */
  cardMaxAgeMs?: number;
}

export function createMcpProbeService({ db, config, now }: Pick<ServiceDeps, 'db' | 'config' | 'now'>, opts: { fetcher?: SafeFetcher } = {}) {
  const fetcher = opts.fetcher ?? createSafeFetcher({ allowPrivate: config.allowPrivateTargets });
  const store = mcpFactsStore(db);

  return {
    fetcher,

    /**
     * Reads the server's tool manifest (throws what readToolManifest throws), then looks for its
     * Server Card, compares the card with what the server just said, and records both.
     */
    async probe(server: { id: number; url: string }, o: McpProbeOptions = {}): Promise<{ manifest: LiveManifest; view: McpTrustView }> {
      const manifest = await readToolManifest(fetcher, server.url, { transport: o.transport, timeoutMs: o.timeoutMs, signal: o.signal });
      const at = now();
      const previous = await store.get(server.id);
      let card: { url: string; claims: CardClaims } | null;
      let fetchedAt: Date;
      if (o.cardMaxAgeMs !== undefined && previous?.card_fetched_at && at.getTime() - previous.card_fetched_at.getTime() < o.cardMaxAgeMs) {
        card = previous.card_url && previous.card_claims ? { url: previous.card_url, claims: previous.card_claims } : null;
        fetchedAt = previous.card_fetched_at;
      } else {
        card = await findServerCard(fetcher, server.url, o.signal);
        fetchedAt = at;
      }
      // Stopped half-way (shutdown): a lookup cut short says nothing about the card; record nothing.
      if (o.signal?.aborted) throw new ProbeFailed('timeout', `the probe of ${server.url} was stopped`);
      const differences = card
        ? compareServerCard(card.claims, {
            url: server.url,
            transport: manifest.transport,
            protocol_version: manifest.protocol_version,
            era: manifest.era,
            server_info: manifest.server_info,
            supported_versions: manifest.supported_versions,
            tools: manifest.has_tools ? manifest.tools.map((t) => t.name) : [],
          })
        : null;
      const row: McpFactsRow = {
        server_id: server.id,
        probed_at: at,
        protocol_version: manifest.protocol_version,
        era: manifest.era,
        transport: manifest.transport,
        server_name: manifest.server_info?.name ?? null,
        server_version: manifest.server_info?.version ?? null,
        supported_versions: manifest.supported_versions,
        card_url: card?.url ?? null,
        card_claims: card?.claims ?? null,
        card_fetched_at: fetchedAt,
        card_differences: differences,
        card_checked_at: card ? at : null,
      };
      await store.put(row);
      memo(db).set(server.id, { row, mono: performance.now() });
      return { manifest, view: viewOf(row, at) };
    },

    /** The MCP side of a server's trust record (see mcpTrustView). */
    view(serverId: number): Promise<McpTrustView | null> {
      return mcpTrustView(db, serverId, now());
    },

    /** Servers whose card contradicted runtime within the flag window, newest first (the /drift page). */
    async cardMismatches(limit = 50) {
      const at = now();
      const rows = await store.cardMismatches(new Date(at.getTime() - CARD_FLAG_WINDOW_MS), Math.min(Math.max(1, limit), 200));
      return rows.map((r) => ({ serverUrl: r.url, name: r.name, slug: r.slug, protocolVersion: r.protocol_version, transport: r.transport, serverCard: serverCardCheckOf(r)! }));
    },
  };
}

export type McpProbeService = ReturnType<typeof createMcpProbeService>;
