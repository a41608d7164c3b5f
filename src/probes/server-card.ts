import { cardDescribes, parseServerCard, reservedCardUrl, SERVER_CARD_MEDIA_TYPE, type CardClaims } from '../domain/server-card.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';
import { parsePeerJson } from '../domain/json-depth.js';

// Finds the Server Card of an MCP server through the safe client (docs/probes.md "Server Cards"),
// where SEP-2127's draft and the frameworks that serve cards put it, in this order:
//   1. <mcp-url>/server-card, the reserved location (always describes that server);
//   2. the MCP Catalog at /.well-known/mcp/catalog.json, following up to CARD_LIMITS.catalogEntries
//      entries of type application/mcp-server-card+json;
//   3. /.well-known/mcp/server-card.json, where some frameworks still serve it.
// A card from 2 or 3 counts only when it lists the probed URL among its remotes. Nothing here
// ever fails a probe: a missing, unreadable or oversized card is simply no card.

export const CARD_LIMITS = { maxBytes: 64 * 1024, totalTimeoutMs: 5_000, catalogEntries: 5, lookupTimeoutMs: 8_000 } as const;

export interface FoundCard {
  url: string;
  location: 'reserved' | 'catalog' | 'well-known';
  claims: CardClaims;
}

const ACCEPT = `${SERVER_CARD_MEDIA_TYPE}, application/json;q=0.9`;

async function getJson(fetcher: SafeFetcher, url: string, signal?: AbortSignal): Promise<unknown> {
  try {
    const res = await fetcher.request(url, { headers: { accept: ACCEPT }, maxBytes: CARD_LIMITS.maxBytes, totalTimeoutMs: CARD_LIMITS.totalTimeoutMs, signal });
    if (res.status !== 200) return null;
    const type = (res.headers.get('content-type') ?? '').toLowerCase();
    if (/html/.test(type)) return null;
    // Depth-bounded, NUL and lone surrogates (which no UTF-8 reader sees and the database cannot store) as U+FFFD.
    return parsePeerJson(res.text());
  } catch (err) {
    if (err instanceof ProbeFailed || err instanceof TargetRefused || err instanceof SyntaxError) return null;
    if ((err as Error)?.name === 'AbortError') return null;
    throw err;
  }
}

/** The card that describes the MCP server at `mcpUrl`, or null when it publishes none we can read (within CARD_LIMITS.lookupTimeoutMs in all). */
export async function findServerCard(fetcher: SafeFetcher, mcpUrl: string, outer?: AbortSignal): Promise<FoundCard | null> {
  const deadline = AbortSignal.timeout(CARD_LIMITS.lookupTimeoutMs);
  const signal = outer ? AbortSignal.any([outer, deadline]) : deadline;
  const reserved = reservedCardUrl(mcpUrl);
  const own = parseServerCard(await getJson(fetcher, reserved, signal));
  if (own) return { url: reserved, location: 'reserved', claims: own };

  const origin = new URL(mcpUrl).origin;
  const catalog = await getJson(fetcher, `${origin}/.well-known/mcp/catalog.json`, signal);
  const entries = typeof catalog === 'object' && catalog !== null && Array.isArray((catalog as { entries?: unknown }).entries) ? ((catalog as { entries: unknown[] }).entries) : [];
  const cardUrls = entries
    .filter((e): e is { type: string; url: string } => typeof e === 'object' && e !== null && (e as { type?: unknown }).type === SERVER_CARD_MEDIA_TYPE && typeof (e as { url?: unknown }).url === 'string')
    .map((e) => {
      try {
        return new URL(e.url, origin).href;
      } catch {
        return null;
      }
    })
    .filter((u): u is string => u !== null && /^https?:/.test(u) && u !== reserved)
    .slice(0, CARD_LIMITS.catalogEntries);
  for (const url of cardUrls) {
    const claims = parseServerCard(await getJson(fetcher, url, signal));
    if (claims && cardDescribes(claims, mcpUrl, 'catalog')) return { url, location: 'catalog', claims };
  }

  const wellKnown = `${origin}/.well-known/mcp/server-card.json`;
  const legacy = parseServerCard(await getJson(fetcher, wellKnown, signal));
  if (legacy && cardDescribes(legacy, mcpUrl, 'well-known')) return { url: wellKnown, location: 'well-known', claims: legacy };
  return null;
}
