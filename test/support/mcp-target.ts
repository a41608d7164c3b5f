import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, Server as ServerV2 } from '@modelcontextprotocol/server';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListToolsRequestSchema, type Tool } from '@modelcontextprotocol/sdk/types.js';

// Real MCP servers on 127.0.0.1 for probe tests, one of each kind the probe must reach, built with
// the official SDKs: startModernMcpTarget (v2 SDK, MCP 2026-07-28 only: no initialize),
// startMcpTarget (SDK 1.x, the 2025 initialize handshake over Streamable HTTP) and
// startSseMcpTarget (SDK 1.x, the HTTP+SSE transport). Each can publish a Server Card.

/** Where a target publishes a Server Card document (SEP-2127 draft locations). */
export interface CardOptions {
  /** `<mcp-url>/server-card` (reserved), the MCP Catalog pointing at it, or /.well-known/mcp/server-card.json. */
  at: 'reserved' | 'catalog' | 'well-known';
  /** The document; a function gets the target's MCP URL. */
  doc: unknown | ((mcpUrl: string) => unknown);
}

/** Answers the card locations; true when it answered. */
function serveCard(req: http.IncomingMessage, res: http.ServerResponse, mcpPath: string, base: () => string, card: CardOptions | null): boolean {
  if (req.method !== 'GET' || !card) return false;
  const path = (req.url ?? '/').split('?')[0];
  const doc = () => JSON.stringify(typeof card.doc === 'function' ? (card.doc as (u: string) => unknown)(`${base()}${mcpPath}`) : card.doc);
  const send = (body: string, type = 'application/mcp-server-card+json') => {
    res.writeHead(200, { 'content-type': type }).end(body);
    return true;
  };
  if (card.at === 'reserved' && path === `${mcpPath}/server-card`) return send(doc());
  if (card.at === 'well-known' && path === '/.well-known/mcp/server-card.json') return send(doc(), 'application/json');
  if (card.at === 'catalog' && path === '/.well-known/mcp/catalog.json') {
    return send(JSON.stringify({ specVersion: 'draft', entries: [{ identifier: 'urn:air:127.0.0.1:target', displayName: 'target', type: 'application/mcp-server-card+json', url: `${base()}/cards/target.json` }] }), 'application/json');
  }
  if (card.at === 'catalog' && path === '/cards/target.json') return send(doc());
  return false;
}

/**
 * A real MCP 2026-07-28 server built with the v2 SDK (createMcpHandler, legacy: 'reject'): no
 * initialize, server/discover only. tools/list is paginated and every answer lists its page in a
 * different order with different per-response metadata (ttlMs, cacheScope, _meta), which must
 * never count as drift. `methods` records every JSON-RPC method it received.
 */
export async function startModernMcpTarget(initial: Tool[], opts: { pageSize?: number; name?: string; version?: string; card?: CardOptions; docs?: Record<string, (mcpUrl: string) => unknown> } = {}) {
  let tools = initial;
  let card = opts.card ?? null;
  const methods: string[] = [];
  let answers = 0;
  const pageSize = opts.pageSize ?? 2;
  const factory = () => {
    const server = new ServerV2({ name: opts.name ?? 'modern-target', version: opts.version ?? '2.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler('tools/list', async (r) => {
      const start = r.params?.cursor ? Number(r.params.cursor) : 0;
      const page = tools.slice(start, start + pageSize);
      const next = start + pageSize < tools.length ? String(start + pageSize) : undefined;
      answers++;
      const shuffled = answers % 2 === 0 ? [...page].reverse() : page;
      // (The tools are plain JSON Schema objects shared with the SDK 1.x targets, hence the cast.)
      return {
        tools: shuffled.map((t) => ({ ...t, _meta: { 'example.com/served': answers } })),
        ttlMs: answers * 1000,
        cacheScope: answers % 2 === 0 ? 'public' : 'private',
        _meta: { 'example.com/page': answers },
        ...(next ? { nextCursor: next } : {}),
      } as never;
    });
    return server;
  };
  const handle = toNodeHandler(createMcpHandler(factory, { legacy: 'reject' }));
  let base = '';
  const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
  // A probe that gives up mid-request (its deadline, a test ending) must not become an unhandled rejection here.
  async function serve(req: http.IncomingMessage, res: http.ServerResponse) {
    if (serveCard(req, res, '/mcp', () => base, card)) return;
    const doc = req.method === 'GET' ? opts.docs?.[(req.url ?? '/').split('?')[0]!] : undefined;
    if (doc) return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(doc(`${base}/mcp`)));
    if (!req.url?.startsWith('/mcp') || req.method !== 'POST') return void res.writeHead(req.url?.startsWith('/mcp') ? 405 : 404).end();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      body = undefined;
    }
    const m = (body as { method?: unknown } | undefined)?.method;
    if (typeof m === 'string') methods.push(m);
    await handle(req, res, body);
  }
  const { port, close } = await listenOnLoopback(srv);
  base = `http://127.0.0.1:${port}`;
  return {
    url: `${base}/mcp`,
    methods,
    setTools(next: Tool[]) {
      tools = next;
    },
    setCard(next: CardOptions | null) {
      card = next;
    },
    close,
  };
}

/**
 * A real MCP server (official SDK 1.x, Streamable HTTP, stateless, the 2025 initialize handshake)
 * on 127.0.0.1 whose tool list the test changes between calls. tools/list is paginated `pageSize`
 * tools per page.
 */
export async function startMcpTarget(initial: Tool[], pageSize = 2, opts: { card?: CardOptions; floodGetStream?: boolean; listDelayMs?: number } = {}) {
  let tools = initial;
  let initializations = 0;
  let card = opts.card ?? null;
  let base = '';
  const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
  async function serve(req: http.IncomingMessage, res: http.ServerResponse) {
    if (serveCard(req, res, '/mcp', () => base, card)) return;
    if (opts.floodGetStream && req.method === 'GET' && req.url?.startsWith('/mcp')) {
      // The optional server-to-client stream, 2 MiB of comments: more than any probe accepts.
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < 2048; i++) res.write(`: ${'x'.repeat(1022)}\n`);
      return;
    }
    if (!req.url?.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    const server = new Server({ name: 'drift-target', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (r) => {
      if (opts.listDelayMs) await new Promise((done) => setTimeout(done, opts.listDelayMs));
      const start = r.params?.cursor ? Number(r.params.cursor) : 0;
      const page = tools.slice(start, start + pageSize);
      const next = start + pageSize < tools.length ? String(start + pageSize) : undefined;
      return next ? { tools: page, nextCursor: next } : { tools: page };
    });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
    if ((body as { method?: string } | undefined)?.method === 'initialize') initializations++;
    await transport.handleRequest(req, res, body);
  }
  const { port, close } = await listenOnLoopback(srv);
  base = `http://127.0.0.1:${port}`;
  return {
    url: `${base}/mcp`,
    setTools(next: Tool[]) {
      tools = next;
    },
    setCard(next: CardOptions | null) {
      card = next;
    },
    /** initialize requests received so far (one per MCP client session). */
    get initializations() {
      return initializations;
    },
    close,
  };
}

/** A real MCP server over the older HTTP+SSE transport (official SDK SSEServerTransport) on 127.0.0.1. */
export async function startSseMcpTarget(tools: Tool[]) {
  const transports = new Map<string, SSEServerTransport>();
  let initializations = 0;
  const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
  async function serve(req: http.IncomingMessage, res: http.ServerResponse) {
    const u = new URL(req.url ?? '/', 'http://x');
    if (req.method === 'GET' && u.pathname === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      transports.set(transport.sessionId, transport);
      res.on('close', () => transports.delete(transport.sessionId));
      const server = new Server({ name: 'sse-target', version: '1.0.0' }, { capabilities: { tools: {} } });
      server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
      await server.connect(transport);
      return;
    }
    if (req.method === 'POST' && u.pathname === '/messages') {
      const transport = transports.get(u.searchParams.get('sessionId') ?? '');
      if (!transport) return res.writeHead(404).end();
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { method?: string };
      if (body.method === 'initialize') initializations++;
      await transport.handlePostMessage(req, res, body);
      return;
    }
    res.writeHead(404).end();
  }
  const { port, close } = await listenOnLoopback(srv);
  return {
    url: `http://127.0.0.1:${port}/sse`,
    get initializations() {
      return initializations;
    },
    close,
  };
}

/**
 * A JSON-RPC endpoint that knows no MCP: every request is answered 200 with an empty result under
 * its own id (a notification 202). Answered under another id, a probe's MCP client would wait out
 * its whole deadline for the answer it is owed.
 */
export function answerEmptyResult(req: http.IncomingMessage, res: http.ServerResponse): void {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (chunk: string) => (body += chunk));
  req.on('end', () => {
    let id: unknown;
    try {
      id = (JSON.parse(body) as { id?: unknown }).id;
    } catch {
      id = undefined;
    }
    if (id === undefined) return void res.writeHead(202).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id, result: {} }));
  });
}

/** A plain HTTP server on 127.0.0.1 answering every request with `handler` (failing, slow or auth-walled "MCP servers"). */
export async function startHttpStub(handler: http.RequestListener) {
  let requests = 0;
  const srv = http.createServer((req, res) => {
    requests++;
    handler(req, res);
  });
  const { port, close } = await listenOnLoopback(srv);
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    get requests() {
      return requests;
    },
    close,
  };
}

/** Listens on a free 127.0.0.1 port; `close` drops open connections and waits for the server to stop. */
async function listenOnLoopback(srv: http.Server): Promise<{ port: number; close: () => Promise<void> }> {
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: (srv.address() as AddressInfo).port,
    async close() {
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    },
  };
}
