import type { AgencyObservation } from '../domain/compliance.js';
import { connectMcp, type McpExchange } from './mcp-manifest.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';

// The live half of the agency checklist: an unauthenticated MCP connection through the one MCP
// probe (v2 SDK client: server/discover for 2026-07-28 servers, initialize for 2025-era ones, SSE
// for the old transport), whose first answer gives the transport, auth challenge and rate-limit
// evidence; the RFC 9728 metadata and the did:web document.

const LIMITS = { maxBytes: 64 * 1024, totalTimeoutMs: 8_000 } as const;
type Live = Pick<AgencyObservation, 'endpoint' | 'protected_resource_metadata' | 'did_document'>;

async function getJson(fetcher: SafeFetcher, url: string): Promise<{ status: number | null; doc: Record<string, unknown> | null }> {
  try {
    const res = await fetcher.request(url, { headers: { accept: 'application/json' }, ...LIMITS });
    if (res.status !== 200) return { status: res.status, doc: null };
    const doc = res.json();
    return { status: res.status, doc: typeof doc === 'object' && doc !== null && !Array.isArray(doc) ? (doc as Record<string, unknown>) : null };
  } catch (err) {
    if (err instanceof ProbeFailed || err instanceof TargetRefused || err instanceof SyntaxError) return { status: null, doc: null };
    throw err;
  }
}

export async function probeAgency(fetcher: SafeFetcher, url: string): Promise<Live> {
  const u = new URL(url);
  const path = u.pathname === '/' ? '' : u.pathname;
  const prmUrls = [`${u.origin}/.well-known/oauth-protected-resource${path}`, `${u.origin}/.well-known/oauth-protected-resource`].filter((x, i, a) => a.indexOf(x) === i);
  const didUrl = `${u.origin}/.well-known/did.json`;

  const endpointP = (async () => {
    // The endpoint's first answer is the evidence, whether or not MCP then succeeds (over the
    // HTTP+SSE transport: the first answer to its GET stream).
    const exchanges: McpExchange[] = [];
    const onExchange = (e: McpExchange) => void (exchanges.length < 16 && exchanges.push(e));
    let mcp: AgencyObservation['endpoint']['mcp'] = null;
    let error: string | null = null;
    try {
      const c = await connectMcp(fetcher, url, { timeoutMs: LIMITS.totalTimeoutMs, onExchange });
      mcp = { protocol_version: c.protocol_version, era: c.era, transport: c.transport };
    } catch (err) {
      if (!(err instanceof ProbeFailed || err instanceof TargetRefused)) throw err;
      error = err.message;
    }
    const f = (mcp?.transport === 'sse' ? exchanges.find((e) => e.method === 'GET') : undefined) ?? exchanges[0];
    if (!f) return { reachable: false, status: null, error: error ?? 'no answer', tls: null, headers: {}, mcp };
    const headers: Record<string, string> = {};
    f.headers.forEach((v, k) => (headers[k] = v));
    return { reachable: true, status: f.status, error, tls: f.tls, headers, mcp };
  })();
  const prmP = (async () => {
    for (const p of prmUrls) {
      const r = await getJson(fetcher, p);
      if (r.doc) {
        const servers = Array.isArray(r.doc.authorization_servers) ? r.doc.authorization_servers.filter((s): s is string => typeof s === 'string') : [];
        return { url: p, found: true, status: r.status, resource: typeof r.doc.resource === 'string' ? r.doc.resource : null, authorization_servers: servers };
      }
      if (p === prmUrls.at(-1)) return { url: p, found: false, status: r.status, resource: null, authorization_servers: [] };
    }
    return { url: prmUrls[0]!, found: false, status: null, resource: null, authorization_servers: [] };
  })();
  const didP = getJson(fetcher, didUrl).then((r) => ({
    url: didUrl,
    found: r.doc !== null,
    status: r.status,
    id: typeof r.doc?.id === 'string' ? r.doc.id : null,
    verification_methods: Array.isArray(r.doc?.verificationMethod) ? r.doc.verificationMethod.length : 0,
  }));
  const [endpoint, protected_resource_metadata, did_document] = await Promise.all([endpointP, prmP, didP]);
  return { endpoint, protected_resource_metadata, did_document };
}
