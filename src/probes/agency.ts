import { INTERFACE_VERSION } from '../config.js';
import type { AgencyObservation } from '../domain/compliance.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';

// The live half of the agency checklist: one unauthenticated MCP initialize (transport, auth
// challenge, rate-limit headers), the RFC 9728 metadata and the did:web document.

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
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'trust-observatory-checklist', version: INTERFACE_VERSION } },
  });
  const path = u.pathname === '/' ? '' : u.pathname;
  const prmUrls = [`${u.origin}/.well-known/oauth-protected-resource${path}`, `${u.origin}/.well-known/oauth-protected-resource`].filter((x, i, a) => a.indexOf(x) === i);
  const didUrl = `${u.origin}/.well-known/did.json`;

  const endpointP = fetcher
    .request(url, { method: 'POST', body: initialize, headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, ...LIMITS })
    .then(
      (res) => {
        const headers: Record<string, string> = {};
        res.headers.forEach((v, k) => (headers[k] = v));
        return { reachable: true, status: res.status, error: null, tls: res.tls, headers };
      },
      (err: unknown) => {
        if (err instanceof ProbeFailed || err instanceof TargetRefused) return { reachable: false, status: null, error: err.message, tls: null, headers: {} };
        throw err;
      },
    );
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
