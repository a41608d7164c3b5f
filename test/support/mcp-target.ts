import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListToolsRequestSchema, type Tool } from '@modelcontextprotocol/sdk/types.js';

/**
 * A real MCP server (official SDK, Streamable HTTP, stateless) on 127.0.0.1 whose tool list the
 * test changes between calls. tools/list is paginated `pageSize` tools per page.
 */
export async function startMcpTarget(initial: Tool[], pageSize = 2) {
  let tools = initial;
  let initializations = 0;
  const srv = http.createServer(async (req, res) => {
    if (!req.url?.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    const server = new Server({ name: 'drift-target', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (r) => {
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
  });
  const { port, close } = await listenOnLoopback(srv);
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    setTools(next: Tool[]) {
      tools = next;
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
  const srv = http.createServer(async (req, res) => {
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
  });
  const { port, close } = await listenOnLoopback(srv);
  return {
    url: `http://127.0.0.1:${port}/sse`,
    get initializations() {
      return initializations;
    },
    close,
  };
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
