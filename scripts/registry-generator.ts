// A synthetic MCP Registry (API v0.1) for scale tests and `npm run bench -- --only=scale100k`:
// GET /v0.1/servers pages of `limit` (default and maximum 100, like the registry) entries with an
// opaque `metadata.nextCursor`, `updated_since` honoured. Entry i is a pure function of i and the
// seed, so every run (and every page asked twice) serves the same catalogue without holding it in
// memory: realistic reverse-DNS names (io.github.<owner>/<name>, com.<company>/<name>), titles and
// descriptions that the category classifier sorts into every category, one remote each
// (streamable-http, one in seven a legacy SSE endpoint) on per-company hosts, semantic versions,
// about 1% deprecated. `servers` entries make exactly `servers` remote servers.
//
// Run alone: `npx tsx scripts/registry-generator.ts [servers] [port]` prints its base URL.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

const OWNERS = ['acme', 'globex', 'initech', 'umbrella', 'hooli', 'stark', 'wayne', 'wonka', 'tyrell', 'cyberdyne', 'soylent', 'massive', 'vandelay', 'dunder', 'pied', 'aperture', 'blackmesa', 'oscorp', 'gringotts', 'monarch', 'nakatomi', 'virtucon', 'zorg', 'duff', 'krusty', 'bluth', 'sterling', 'prestige', 'waystar', 'lacroix'];
const ADJ = ['fast', 'open', 'smart', 'tiny', 'cloud', 'local', 'secure', 'simple', 'super', 'hyper', 'micro', 'meta', 'deep', 'quick', 'easy', 'live', 'auto', 'rapid', 'prime', 'nova'];
// Topic words: each matches a category keyword (src/domain/category.ts), or none (general).
const TOPICS: { word: string; title: string; what: string }[] = [
  { word: 'weather', title: 'Weather', what: 'Current conditions and forecasts for any city' },
  { word: 'forecast', title: 'Forecast', what: 'Hourly and daily forecasts' },
  { word: 'stripe', title: 'Stripe', what: 'Payments, invoices and refunds' },
  { word: 'invoice', title: 'Invoicing', what: 'Create and send invoices' },
  { word: 'crypto', title: 'Crypto Prices', what: 'Quotes for coins and tokens' },
  { word: 'gdpr', title: 'GDPR Toolkit', what: 'Data subject requests and records of processing' },
  { word: 'audit', title: 'Audit Log', what: 'Searchable audit trails' },
  { word: 'search', title: 'Web Search', what: 'Search the web and fetch result pages' },
  { word: 'scrape', title: 'Scraper', what: 'Fetch and clean web pages' },
  { word: 'slack', title: 'Slack', what: 'Post and read channel messages' },
  { word: 'email', title: 'Email', what: 'Send and search email' },
  { word: 'github', title: 'GitHub', what: 'Issues, pull requests and code search' },
  { word: 'deploy', title: 'Deployments', what: 'Ship builds to staging and production' },
  { word: 'kubernetes', title: 'Kubernetes', what: 'Inspect pods, logs and rollouts' },
  { word: 'postgres', title: 'Postgres', what: 'Read-only SQL over your database' },
  { word: 'analytics', title: 'Analytics', what: 'Dashboards and event queries' },
  { word: 'vector', title: 'Vector Store', what: 'Embeddings and similarity search' },
  { word: 'notion', title: 'Notion', what: 'Pages, databases and comments' },
  { word: 'calendar', title: 'Calendar', what: 'Events, free/busy and invitations' },
  { word: 'jira', title: 'Jira', what: 'Tickets, sprints and boards' },
  { word: 'maps', title: 'Maps', what: 'Geocoding, directions and places' },
  { word: 'flight', title: 'Flights', what: 'Flight status and fares' },
  { word: 'youtube', title: 'YouTube', what: 'Video search and transcripts' },
  { word: 'spotify', title: 'Spotify', what: 'Playlists and playback' },
  { word: 'arxiv', title: 'arXiv', what: 'Paper search and abstracts' },
  { word: 'course', title: 'Courses', what: 'Lessons, quizzes and progress' },
  { word: 'cve', title: 'CVE Lookup', what: 'Vulnerabilities by product and version' },
  { word: 'scanner', title: 'Scanner', what: 'Dependency and secret scanning' },
  { word: 'fhir', title: 'FHIR', what: 'Patient records over FHIR' },
  { word: 'nutrition', title: 'Nutrition', what: 'Foods, calories and macros' },
  { word: 'toolbox', title: 'Toolbox', what: 'Assorted utilities' },
  { word: 'assistant', title: 'Assistant', what: 'General helpers for agents' },
  { word: 'bridge', title: 'Bridge', what: 'Connects agents to internal systems' },
];

/** A small deterministic hash (xorshift-multiply), so entry i is the same on every run. */
function mix(i: number, salt: number): number {
  let x = (i * 0x9e3779b1 + salt * 0x85ebca77) >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  x ^= x >>> 16;
  return x >>> 0;
}
const pick = <T>(xs: readonly T[], i: number, salt: number) => xs[mix(i, salt) % xs.length]!;

export interface GeneratorOptions {
  servers: number;
  /** Changes every name (two generators with different seeds list different catalogues). */
  seed?: number;
  /** Time of the first entry's updatedAt; entry i is i seconds later. */
  epoch?: Date;
}

/** Entry i (0-based) of the synthetic catalogue: a registry v0.1 `servers[]` element. */
export function registryEntry(i: number, opts: GeneratorOptions): Record<string, unknown> {
  const seed = opts.seed ?? 1;
  const epoch = (opts.epoch ?? new Date('2026-01-01T00:00:00Z')).getTime();
  const owner = pick(OWNERS, i, seed);
  const topic = pick(TOPICS, i, seed + 1);
  const adj = pick(ADJ, i, seed + 2);
  // The index keeps names unique; the words make them look like the registry's.
  const slug = `${adj}-${topic.word}-${i.toString(36)}`;
  const github = mix(i, seed + 3) % 3 !== 0;
  const name = github ? `io.github.${owner}/${slug}` : `com.${owner}/${slug}`;
  const host = `${owner}-${(i % 997).toString(36)}.mcp-scale.example`;
  const h = mix(i, seed + 4);
  const version = `${h % 4}.${(h >>> 4) % 20}.${(h >>> 9) % 30}`;
  const updatedAt = new Date(epoch + i * 1000).toISOString();
  const sse = h % 7 === 0;
  const remotes = [sse ? { type: 'sse', url: `https://${host}/${slug}/sse` } : { type: 'streamable-http', url: `https://${host}/${slug}/mcp` }];
  const server: Record<string, unknown> = {
    $schema: 'https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json',
    name,
    title: `${adj[0]!.toUpperCase()}${adj.slice(1)} ${topic.title}`,
    description: `${topic.what}. Maintained by ${owner}.`,
    version,
    ...(github ? { repository: { url: `https://github.com/${owner}/${slug}`, source: 'github' } } : {}),
    remotes,
  };
  return {
    server,
    _meta: {
      'io.modelcontextprotocol.registry/official': {
        status: h % 97 === 0 ? 'deprecated' : 'active',
        publishedAt: new Date(epoch - 86_400_000 + i * 1000).toISOString(),
        updatedAt,
        isLatest: true,
      },
    },
  };
}

/** The remote URLs entry i lists (what the observatory tracks), for tests and the bench. */
export function entryRemoteUrls(i: number, opts: GeneratorOptions): string[] {
  const s = registryEntry(i, opts).server as { remotes?: { url: string }[] };
  return (s.remotes ?? []).map((r) => r.url);
}

/** One page as the registry answers it; `cursor` is opaque (here the next index, base36). */
export function registryPage(opts: GeneratorOptions, q: { cursor?: string | null; limit?: number; updatedSince?: string | null }): { servers: unknown[]; metadata: { count: number; nextCursor?: string } } {
  const limit = Math.max(1, Math.min(100, q.limit ?? 100));
  let start = q.cursor ? parseInt(q.cursor.replace(/^c/, ''), 36) : 0;
  if (!Number.isFinite(start) || start < 0) start = opts.servers;
  if (q.updatedSince) {
    const since = Date.parse(q.updatedSince);
    const epoch = (opts.epoch ?? new Date('2026-01-01T00:00:00Z')).getTime();
    if (Number.isFinite(since)) start = Math.max(start, Math.floor((since - epoch) / 1000) + 1);
  }
  const end = Math.min(opts.servers, start + limit);
  const servers: unknown[] = [];
  for (let i = start; i < end; i++) servers.push(registryEntry(i, opts));
  return { servers, metadata: { count: servers.length, ...(end < opts.servers ? { nextCursor: `c${end.toString(36)}` } : {}) } };
}

export interface RegistryServer {
  /** Base URL (the service reads its /v0.1/servers). */
  url: string;
  /** Pages served so far. */
  pages(): number;
  close(): Promise<void>;
}

/** Serves the synthetic registry on 127.0.0.1 (port 0: any free port). */
export function startRegistry(opts: GeneratorOptions & { port?: number }): Promise<RegistryServer> {
  let pages = 0;
  const server: Server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://registry.local');
    if (req.method !== 'GET' || u.pathname !== '/v0.1/servers') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"title":"Not Found","status":404}');
      return;
    }
    const limit = u.searchParams.has('limit') ? Number(u.searchParams.get('limit')) : 100;
    if (!Number.isInteger(limit) || limit < 1) {
      res.writeHead(422, { 'content-type': 'application/json' }).end('{"title":"Unprocessable Entity","status":422,"detail":"limit must be a positive integer"}');
      return;
    }
    pages++;
    const body = JSON.stringify(registryPage(opts, { cursor: u.searchParams.get('cursor'), limit, updatedSince: u.searchParams.get('updated_since') }));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        pages: () => pages,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const servers = Number(process.argv[2] ?? 100_000);
  const reg = await startRegistry({ servers, port: Number(process.argv[3] ?? 0) });
  process.stdout.write(`synthetic MCP Registry with ${servers} servers at ${reg.url}/v0.1/servers\n`);
}
