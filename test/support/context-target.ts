import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, ProtocolError, Server } from '@modelcontextprotocol/server';
import { Server as Sdk1Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListPromptsRequestSchema, ListResourcesRequestSchema, ListResourceTemplatesRequestSchema, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

// A real MCP server (official SDK v2, @modelcontextprotocol/server) on 127.0.0.1 whose context the
// test changes between probes: the `instructions` of its initialize / server/discover result, its
// prompts, resources and resource templates, each list paginated `pageSize` per page. It speaks
// MCP 2026-07-28 (server/discover) and, unless `modernOnly`, the 2025 initialize handshake too
// (createMcpHandler's stateless legacy leg). With `sdk1` it is an SDK 1.x server instead, which
// speaks only the 2025 handshake (its instructions come with initialize). `methods` records every
// JSON-RPC method it received.

export interface PromptDef {
  name: string;
  title?: string;
  description?: string;
  arguments?: { name: string; description?: string; required?: boolean }[];
}
export interface ResourceDef {
  uri: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
}
export interface TemplateDef {
  uriTemplate: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
}

export interface ContextState {
  instructions?: string;
  /** Announced as capabilities only when set (undefined: the capability is not announced). */
  prompts?: PromptDef[];
  resources?: ResourceDef[];
  templates?: TemplateDef[];
  /** A list the server announces but fails: 'not_found' answers Method not found, 'error' an internal error, 'hang' never answers. */
  fail?: Partial<Record<'prompts' | 'resources' | 'templates', 'not_found' | 'error' | 'hang'>>;
  /** Every page repeats this cursor forever (a list that never ends). */
  endlessCursor?: boolean;
  pageSize?: number;
  /** The tools listed (default: TOOL alone). */
  tools?: { name: string; description?: string; inputSchema: { type: 'object'; properties?: Record<string, unknown> } }[];
}

export const TOOL = { name: 'get_forecast', description: 'Forecast for a city', inputSchema: { type: 'object' as const, properties: { city: { type: 'string' } } } };

export async function startContextTarget(initial: ContextState, opts: { modernOnly?: boolean; sdk1?: boolean; name?: string } = {}) {
  let state: ContextState = initial;
  const methods: string[] = [];
  const hung = new Set<() => void>();
  const page = <T>(list: T[], cursor: string | undefined) => {
    const size = state.pageSize ?? 2;
    const start = cursor ? Number(cursor) : 0;
    const next = state.endlessCursor ? String(start) : start + size < list.length ? String(start + size) : undefined;
    return { items: list.slice(start, start + size), next };
  };
  const failOr = async (which: 'prompts' | 'resources' | 'templates') => {
    const f = state.fail?.[which];
    if (f === 'not_found') throw opts.sdk1 ? new McpError(-32601, 'Method not found') : new ProtocolError(-32601, 'Method not found');
    if (f === 'error') throw new Error('the listing is broken today');
    if (f === 'hang') await new Promise<void>((r) => hung.add(r));
  };
  const factory = () => {
    const s = state;
    const server = new Server(
      { name: opts.name ?? 'context-target', version: '1.0.0' },
      {
        capabilities: { tools: {}, ...(s.prompts ? { prompts: {} } : {}), ...(s.resources || s.templates ? { resources: {} } : {}) },
        ...(s.instructions !== undefined ? { instructions: s.instructions } : {}),
      },
    );
    server.setRequestHandler('tools/list', async () => ({ tools: s.tools ?? [TOOL] }) as never);
    if (s.prompts) {
      server.setRequestHandler('prompts/list', async (r) => {
        await failOr('prompts');
        const p = page(s.prompts ?? [], r.params?.cursor);
        return { prompts: p.items, ...(p.next ? { nextCursor: p.next } : {}) } as never;
      });
    }
    if (s.resources || s.templates) {
      server.setRequestHandler('resources/list', async (r) => {
        await failOr('resources');
        const p = page(s.resources ?? [], r.params?.cursor);
        return { resources: p.items, ...(p.next ? { nextCursor: p.next } : {}) } as never;
      });
      server.setRequestHandler('resources/templates/list', async (r) => {
        await failOr('templates');
        const p = page(s.templates ?? [], r.params?.cursor);
        return { resourceTemplates: p.items, ...(p.next ? { nextCursor: p.next } : {}) } as never;
      });
    }
    return server;
  };
  /** The same server on SDK 1.x (2025 handshake only). */
  const sdk1Factory = () => {
    const s = state;
    const server = new Sdk1Server(
      { name: opts.name ?? 'context-target', version: '1.0.0' },
      {
        capabilities: { tools: {}, ...(s.prompts ? { prompts: {} } : {}), ...(s.resources || s.templates ? { resources: {} } : {}) },
        ...(s.instructions !== undefined ? { instructions: s.instructions } : {}),
      },
    );
    server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: s.tools ?? [TOOL] }));
    if (s.prompts) {
      server.setRequestHandler(ListPromptsRequestSchema, async (r) => {
        await failOr('prompts');
        const p = page(s.prompts ?? [], r.params?.cursor);
        return { prompts: p.items, ...(p.next ? { nextCursor: p.next } : {}) };
      });
    }
    if (s.resources || s.templates) {
      server.setRequestHandler(ListResourcesRequestSchema, async (r) => {
        await failOr('resources');
        const p = page(s.resources ?? [], r.params?.cursor);
        return { resources: p.items, ...(p.next ? { nextCursor: p.next } : {}) };
      });
      server.setRequestHandler(ListResourceTemplatesRequestSchema, async (r) => {
        await failOr('templates');
        const p = page(s.templates ?? [], r.params?.cursor);
        return { resourceTemplates: p.items, ...(p.next ? { nextCursor: p.next } : {}) };
      });
    }
    return server;
  };
  const v2 = toNodeHandler(createMcpHandler(factory, opts.modernOnly ? { legacy: 'reject' } : {}));
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse, body: unknown) => {
    if (!opts.sdk1) return v2(req, res, body);
    const server = sdk1Factory();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  };
  const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
  async function serve(req: http.IncomingMessage, res: http.ServerResponse) {
    if (!req.url?.startsWith('/mcp')) return void res.writeHead(404).end();
    if (req.method !== 'POST') return void res.writeHead(405).end();
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
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    methods,
    set(next: ContextState) {
      state = next;
    },
    get state() {
      return state;
    },
    async close() {
      for (const r of hung) r();
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    },
  };
}
