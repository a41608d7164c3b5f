// A loopback fleet of MCP servers (issue 23 item 3): one process serves thousands of servers on
// distinct paths (and, with `ports > 1`, distinct ports), each a real MCP endpoint built with the
// official SDK v2 (createMcpHandler: MCP 2026-07-28 server/discover, and the stateless 2025
// initialize fallback). Per server, deterministically from its index and the seed:
//   - the era it speaks: modern (2026-07-28 and 2025) or legacy-only (answers server/discover
//     with JSON-RPC -32601, as a 2025 server does, so the client falls back to initialize);
//   - its latency (base + jitter, added before each answer);
//   - whether it is dead (every request 503) and how often a healthy one fails (500);
//   - whether its manifest changes every `changeEveryMs` (a tool description carries the version).
// GET /_fleet/stats answers what each server answered (tools/list times per server), so a bench
// can judge the scheduler from the servers' side. Used by scripts/bench-observation.ts and
// test/fleet.test.ts; run alone: `npx tsx scripts/fleet-sim.ts --servers 10000 --port 7400`.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, Server } from '@modelcontextprotocol/server';

export interface FleetOptions {
  servers: number;
  /** Listening ports (0 = any free one); servers are spread over them round-robin. Default 1. */
  ports?: number;
  /** First port when ports are fixed (CLI); default 0 = free ports. */
  basePort?: number;
  /** Added before every answer: base + uniform jitter, in ms. Default 0 / 0. */
  latencyMs?: number;
  jitterMs?: number;
  /** Share of servers that are dead (every request 503). Default 0. */
  deadShare?: number;
  /** Probability that one request to a live server fails with 500. Default 0. */
  failureRate?: number;
  /** Share of servers that only speak the 2025 initialize handshake. Default 0.3. */
  legacyShare?: number;
  /** Share of servers whose manifest changes every changeEveryMs. Default 0. */
  changeShare?: number;
  changeEveryMs?: number;
  /** Tools per server (2..6 by index when omitted). */
  tools?: number;
  seed?: number;
}

export interface ServerStats {
  /** Epoch ms of each tools/list the server answered. */
  lists: number[];
  requests: number;
  /** Epoch ms of the first request (any), null before. */
  firstAt: number | null;
}

export interface Fleet {
  /** MCP URL of server i. */
  url(i: number): string;
  urls: string[];
  /** Registry v0.1 document listing every server (for catalogue.importDocument or a file). */
  registryDocument(): { servers: unknown[]; metadata: { count: number } };
  stats: ServerStats[];
  /** Bumps server i's manifest now (a changed tool description). */
  change(i: number): void;
  /** Profile of server i as the simulator sees it. */
  profile(i: number): ServerProfile;
  resetStats(): void;
  close(): Promise<void>;
}

export interface ServerProfile {
  legacy: boolean;
  dead: boolean;
  changes: boolean;
  latencyMs: number;
  tools: number;
}

/** A small deterministic hash in [0, 1) of (seed, i, salt). */
function unit(seed: number, i: number, salt: number): number {
  let h = (seed * 0x9e3779b1) ^ (i * 0x85ebca6b) ^ (salt * 0xc2b2ae35);
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  h = Math.imul(h ^ (h >>> 15), 0x846ca68b);
  h ^= h >>> 16;
  return (h >>> 0) / 2 ** 32;
}

const CATEGORIES = ['weather', 'search', 'finance', 'devtools', 'database', 'maps', 'email', 'calendar'];

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const seed = o.seed ?? 1;
  const n = o.servers;
  const bumps = new Int32Array(n);
  const stats: ServerStats[] = Array.from({ length: n }, () => ({ lists: [], requests: 0, firstAt: null }));
  const started = Date.now();

  const profile = (i: number): ServerProfile => ({
    legacy: unit(seed, i, 1) < (o.legacyShare ?? 0.3),
    dead: unit(seed, i, 2) < (o.deadShare ?? 0),
    changes: unit(seed, i, 3) < (o.changeShare ?? 0),
    latencyMs: (o.latencyMs ?? 0) + unit(seed, i, 4) * (o.jitterMs ?? 0),
    tools: o.tools ?? 2 + Math.floor(unit(seed, i, 5) * 5),
  });
  const profiles = Array.from({ length: n }, (_, i) => profile(i));

  const version = (i: number) => {
    const p = profiles[i]!;
    const timed = p.changes && o.changeEveryMs ? Math.floor((Date.now() - started) / o.changeEveryMs) : 0;
    return timed + bumps[i]!;
  };
  const toolsOf = (i: number) => {
    const cat = CATEGORIES[i % CATEGORIES.length]!;
    const v = version(i);
    return Array.from({ length: profiles[i]!.tools }, (_, k) => ({
      name: `${cat}_tool_${k}`,
      description: k === 0 && v > 0 ? `Tool ${k} of fleet server ${i} (revision ${v})` : `Tool ${k} of fleet server ${i}`,
      inputSchema: { type: 'object' as const, properties: { q: { type: 'string' } } },
    }));
  };

  // One handler for the whole fleet: the factory reads the server index from the request path.
  const indexOf = (url: string): number | null => {
    const m = /^\/s\/(\d+)\/mcp(?:[/?]|$)/.exec(url);
    if (!m) return null;
    const i = Number(m[1]);
    return i < n ? i : null;
  };
  const handler = toNodeHandler(
    createMcpHandler((ctx) => {
      const i = indexOf(new URL(ctx.requestInfo?.url ?? 'http://x/').pathname) ?? 0;
      const server = new Server({ name: `fleet-${i}`, version: '1.0.0' }, { capabilities: { tools: {} } });
      server.setRequestHandler('tools/list', async () => {
        stats[i]!.lists.push(Date.now());
        return { tools: toolsOf(i) } as never;
      });
      return server;
    }),
  );

  async function serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = req.url ?? '/';
    if (req.method === 'GET' && path === '/_fleet/stats') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ servers: n, startedAt: started, stats }));
      return;
    }
    if (req.method === 'GET' && path === '/_fleet/registry') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(registryDocument()));
      return;
    }
    const i = indexOf(path);
    if (i === null) return void res.writeHead(404).end();
    const p = profiles[i]!;
    stats[i]!.requests++;
    stats[i]!.firstAt ??= Date.now();
    if (p.latencyMs > 0) await new Promise((r) => setTimeout(r, p.latencyMs));
    if (p.dead) return void res.writeHead(503, { 'content-type': 'text/plain' }).end('unavailable');
    if (req.method !== 'POST') return void res.writeHead(405).end();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      body = undefined;
    }
    const msg = body as { method?: unknown; id?: unknown } | undefined;
    if (o.failureRate && msg?.method !== undefined && Math.random() < o.failureRate) {
      return void res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"internal"}');
    }
    if (p.legacy && msg?.method === 'server/discover') {
      // What a 2025-era server answers to a method it does not know.
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id ?? null, error: { code: -32601, message: 'Method not found' } }));
    }
    await handler(req, res, body);
  }

  const servers: http.Server[] = [];
  const ports: number[] = [];
  for (let k = 0; k < Math.max(1, o.ports ?? 1); k++) {
    const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
    srv.keepAliveTimeout = 1000;
    srv.maxConnections = 20_000;
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(o.basePort ? o.basePort + k : 0, '127.0.0.1', () => resolve());
    });
    servers.push(srv);
    ports.push((srv.address() as AddressInfo).port);
  }
  const url = (i: number) => `http://127.0.0.1:${ports[i % ports.length]}/s/${i}/mcp`;
  const urls = Array.from({ length: n }, (_, i) => url(i));
  function registryDocument() {
    return {
      servers: urls.map((u, i) => ({
        server: {
          name: `io.github.fleet-${i % 97}/${CATEGORIES[i % CATEGORIES.length]}-server-${i}`,
          description: `Fleet server ${i}`,
          version: '1.0.0',
          remotes: [{ type: 'streamable-http', url: u }],
        },
        _meta: { 'io.modelcontextprotocol.registry/official': { status: 'active', isLatest: true, publishedAt: '2026-01-01T00:00:00Z', updatedAt: '2026-01-01T00:00:00Z' } },
      })),
      metadata: { count: n },
    };
  }

  return {
    url,
    urls,
    stats,
    profile: (i) => profiles[i]!,
    registryDocument,
    change(i) {
      bumps[i]!++;
    },
    resetStats() {
      for (const s of stats) {
        s.lists = [];
        s.requests = 0;
        s.firstAt = null;
      }
    },
    async close() {
      await Promise.all(
        servers.map(
          (s) =>
            new Promise<void>((r) => {
              s.closeAllConnections();
              s.close(() => r());
            }),
        ),
      );
    },
  };
}

// CLI: serve a fleet until SIGTERM/SIGINT; prints one line with the first URL and the stats URL.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string, dflt: number) => {
    const k = process.argv.indexOf(`--${name}`);
    return k > 0 ? Number(process.argv[k + 1]) : dflt;
  };
  const fleet = await startFleet({
    servers: arg('servers', 1000),
    ports: arg('ports', 1),
    basePort: arg('port', 0),
    latencyMs: arg('latency', 0),
    jitterMs: arg('jitter', 0),
    deadShare: arg('dead', 0),
    failureRate: arg('failures', 0),
    legacyShare: arg('legacy', 0.3),
    changeShare: arg('change-share', 0),
    changeEveryMs: arg('change-every', 0),
    seed: arg('seed', 1),
  });
  const first = fleet.url(0);
  process.stdout.write(`fleet ${fleet.urls.length} servers: ${first} … stats ${new URL('/_fleet/stats', first).href}\n`);
  const stop = () => void fleet.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
