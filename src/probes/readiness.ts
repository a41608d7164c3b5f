import { INTERFACE_VERSION } from '../config.js';
import { JsonTooDeep, parsePeerJson } from '../domain/json-depth.js';
import { mcpEndpoint, SURFACES, type ReadinessObservation, type SurfaceName } from '../domain/readiness.js';
import { connectMcp } from './mcp-manifest.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';
import { findServerCard } from './server-card.js';

// Fetches the five agent-facing documents of a site through the safe client. A document counts
// as found when it answers 200 with a usable body: text that is not an HTML page, or a JSON object.

export const READINESS_LIMITS = { maxBytes: 256 * 1024, totalTimeoutMs: 8_000 } as const;

export interface SurfaceProbe {
  surface: SurfaceName;
  path: string;
  found: boolean;
  http_status: number | null;
  note: string;
}

export async function probeReadiness(fetcher: SafeFetcher, origin: string): Promise<{ observation: ReadinessObservation; probes: SurfaceProbe[] }> {
  const docs: Partial<Record<SurfaceName, unknown>> = {};
  const probes = await Promise.all(
    SURFACES.map(async (s): Promise<SurfaceProbe> => {
      const accept = s.kind === 'json' ? 'application/json' : 'text/plain, text/markdown;q=0.9, */*;q=0.1';
      try {
        const res = await fetcher.request(`${origin}${s.path}`, { headers: { accept }, ...READINESS_LIMITS });
        const base = { surface: s.surface, path: s.path, http_status: res.status };
        if (res.status !== 200) return { ...base, found: false, note: `answered ${res.status}` };
        const type = res.headers.get('content-type') ?? '';
        const text = res.text();
        if (s.kind === 'text') {
          if (/html/i.test(type) || /^\s*<(!doctype|html)/i.test(text)) return { ...base, found: false, note: 'answered an HTML page, not the document' };
          if (text.trim() === '') return { ...base, found: false, note: 'empty document' };
          docs[s.surface] = text;
          return { ...base, found: true, note: 'found' };
        }
        let parsed: unknown;
        try {
          parsed = parsePeerJson(text);
        } catch (err) {
          return { ...base, found: false, note: err instanceof JsonTooDeep ? `not valid JSON: ${err.message}` : 'not valid JSON' };
        }
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { ...base, found: false, note: 'not a JSON object' };
        docs[s.surface] = parsed;
        return { ...base, found: true, note: 'found' };
      } catch (err) {
        if (err instanceof TargetRefused) return { surface: s.surface, path: s.path, found: false, http_status: null, note: `redirect refused: ${err.reason}` };
        if (err instanceof ProbeFailed) return { surface: s.surface, path: s.path, found: false, http_status: null, note: err.message };
        throw err;
      }
    }),
  );
  return {
    observation: {
      https: origin.startsWith('https:'),
      robots: (docs['robots.txt'] as string | undefined) ?? null,
      llms: (docs['llms.txt'] as string | undefined) ?? null,
      openapi: (docs['openapi.json'] as Record<string, unknown> | undefined) ?? null,
      mcp: (docs['mcp.json'] as Record<string, unknown> | undefined) ?? null,
      agent: (docs['agent.json'] as Record<string, unknown> | undefined) ?? null,
    },
    probes,
  };
}

/** What the MCP endpoint a site names in mcp.json said when the one MCP probe connected (informational, unscored). */
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
 * Connects to the MCP endpoint mcp.json names (the v2 client: 2026-07-28 servers, 2025-era ones
 * and HTTP+SSE alike) and looks for its Server Card. Null when mcp.json names none. Never throws
 * for the endpoint's faults: they are the note.
 */
export async function probeMcpEndpoint(fetcher: SafeFetcher, origin: string, mcp: Record<string, unknown> | null): Promise<McpEndpointProbe | null> {
  const named = mcpEndpoint(mcp);
  if (named === null) return null;
  let url: string;
  try {
    url = new URL(named, origin).href;
  } catch {
    return { url: named, reached: false, protocol_version: null, era: null, transport: null, server_card: null, note: 'mcp.json names an endpoint that is not a URL' };
  }
  try {
    const c = await connectMcp(fetcher, url, INTERFACE_VERSION, { clientName: 'trust-observatory-readiness', timeoutMs: READINESS_LIMITS.totalTimeoutMs });
    const card = await findServerCard(fetcher, url);
    return { url, reached: true, protocol_version: c.protocol_version, era: c.era, transport: c.transport, server_card: card?.url ?? null, note: `speaks MCP ${c.protocol_version} over ${c.transport}` };
  } catch (err) {
    if (err instanceof ProbeFailed || err instanceof TargetRefused) return { url, reached: false, protocol_version: null, era: null, transport: null, server_card: null, note: err.message };
    throw err;
  }
}
