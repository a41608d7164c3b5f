import { JsonTooDeep, parsePeerJson } from '../domain/json-depth.js';
import { mcpEndpoint, SURFACES, type ReadinessObservation, type SurfaceName, type SurfaceSlot } from '../domain/readiness.js';
import { parseServerCard } from '../domain/server-card.js';
import { connectMcp } from './mcp-manifest.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';
import { findServerCard } from './server-card.js';

// Fetches the agent-facing documents of a site through the safe client (SURFACES: five, and the
// alternative location of the MCP and A2A documents when the first is not found; at most 7
// requests, each with up to 3 redirects). A document counts as found when it answers 200 with a
// usable body: text that is not an HTML page, a JSON object, or (the MCP Server Card) a JSON
// object that reads as a card.

/** Per document; the documents of one slot (a document and its alternative) share the one deadline. */
export const READINESS_LIMITS = { maxBytes: 256 * 1024, totalTimeoutMs: 8_000 } as const;

export interface SurfaceProbe {
  surface: SurfaceName;
  path: string;
  found: boolean;
  http_status: number | null;
  note: string;
}

type Surface = (typeof SURFACES)[number];

async function probeSurface(fetcher: SafeFetcher, origin: string, s: Surface, totalTimeoutMs: number): Promise<{ probe: SurfaceProbe; doc?: unknown }> {
  const accept = s.kind === 'text' ? 'text/plain, text/markdown;q=0.9, */*;q=0.1' : 'application/json';
  try {
    const res = await fetcher.request(`${origin}${s.path}`, { headers: { accept }, maxBytes: READINESS_LIMITS.maxBytes, totalTimeoutMs });
    const base = { surface: s.surface, path: s.path, http_status: res.status };
    if (res.status !== 200) return { probe: { ...base, found: false, note: `answered ${res.status}` } };
    const type = res.headers.get('content-type') ?? '';
    const text = res.text();
    if (s.kind === 'text') {
      if (/html/i.test(type) || /^\s*<(!doctype|html)/i.test(text)) return { probe: { ...base, found: false, note: 'answered an HTML page, not the document' } };
      if (text.trim() === '') return { probe: { ...base, found: false, note: 'empty document' } };
      return { probe: { ...base, found: true, note: 'found' }, doc: text };
    }
    let parsed: unknown;
    try {
      parsed = parsePeerJson(text);
    } catch (err) {
      return { probe: { ...base, found: false, note: err instanceof JsonTooDeep ? `not valid JSON: ${err.message}` : 'not valid JSON' } };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { probe: { ...base, found: false, note: 'not a JSON object' } };
    if (s.kind === 'server-card' && parseServerCard(parsed) === null) return { probe: { ...base, found: false, note: 'not a Server Card (no name, version, remotes or tools)' } };
    return { probe: { ...base, found: true, note: 'found' }, doc: parsed };
  } catch (err) {
    if (err instanceof TargetRefused) return { probe: { surface: s.surface, path: s.path, found: false, http_status: null, note: `redirect refused: ${err.reason}` } };
    if (err instanceof ProbeFailed) return { probe: { surface: s.surface, path: s.path, found: false, http_status: null, note: err.message } };
    throw err;
  }
}

export async function probeReadiness(fetcher: SafeFetcher, origin: string): Promise<{ observation: ReadinessObservation; probes: SurfaceProbe[] }> {
  const slots = [...new Set(SURFACES.map((s) => s.slot))];
  const docs: Partial<Record<SurfaceSlot, { doc: unknown; path: string }>> = {};
  // Slots in parallel; within a slot, the alternative only when the document before was not
  // found, within what is left of the slot's one deadline.
  const perSlot = await Promise.all(
    slots.map(async (slot) => {
      const until = Date.now() + READINESS_LIMITS.totalTimeoutMs;
      const probes: SurfaceProbe[] = [];
      for (const s of SURFACES.filter((x) => x.slot === slot)) {
        const left = until - Date.now();
        if (left <= 0) {
          probes.push({ surface: s.surface, path: s.path, found: false, http_status: null, note: `not probed: the ${READINESS_LIMITS.totalTimeoutMs} ms of this surface were spent` });
          break;
        }
        const { probe, doc } = await probeSurface(fetcher, origin, s, left);
        probes.push(probe);
        if (probe.found) {
          docs[slot] = { doc, path: s.path };
          break;
        }
      }
      return probes;
    }),
  );
  const probes = perSlot.flat();
  return {
    observation: {
      https: origin.startsWith('https:'),
      robots: (docs.robots?.doc as string | undefined) ?? null,
      llms: (docs.llms?.doc as string | undefined) ?? null,
      openapi: (docs.openapi?.doc as Record<string, unknown> | undefined) ?? null,
      mcp: (docs.mcp?.doc as Record<string, unknown> | undefined) ?? null,
      agent: (docs.agent?.doc as Record<string, unknown> | undefined) ?? null,
      foundAt: { mcp: docs.mcp?.path, agent: docs.agent?.path },
    },
    probes,
  };
}

/** What the MCP endpoint a site names in mcp.json (or its Server Card) said when the one MCP probe connected (informational, unscored). */
export interface McpEndpointProbe {
  url: string;
  reached: boolean;
  protocol_version: string | null;
  era: 'modern' | 'legacy' | null;
  transport: 'streamable-http' | 'sse' | null;
  /** Where its Server Card is, when it publishes one that describes it. */
  server_card: string | null;
  note: string;
}

/**
 * Connects to the MCP endpoint mcp.json (or the Server Card) names (the v2 client: 2026-07-28 servers, 2025-era ones
 * and HTTP+SSE alike) and looks for its Server Card. Null when it names none. Never throws
 * for the endpoint's faults: they are the note.
 */
export async function probeMcpEndpoint(fetcher: SafeFetcher, origin: string, mcp: Record<string, unknown> | null): Promise<McpEndpointProbe | null> {
  const named = mcpEndpoint(mcp);
  if (named === null) return null;
  let url: string;
  try {
    url = new URL(named, origin).href;
  } catch {
    return { url: named, reached: false, protocol_version: null, era: null, transport: null, server_card: null, note: 'the named MCP endpoint is not a URL' };
  }
  try {
    const c = await connectMcp(fetcher, url, { timeoutMs: READINESS_LIMITS.totalTimeoutMs });
    const card = await findServerCard(fetcher, url);
    return { url, reached: true, protocol_version: c.protocol_version, era: c.era, transport: c.transport, server_card: card?.url ?? null, note: `speaks MCP ${c.protocol_version} over ${c.transport}` };
  } catch (err) {
    if (err instanceof ProbeFailed || err instanceof TargetRefused) return { url, reached: false, protocol_version: null, era: null, transport: null, server_card: null, note: err.message };
    throw err;
  }
}
