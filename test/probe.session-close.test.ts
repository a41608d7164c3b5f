import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { connectMcp, readToolManifest, type McpExchange } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher } from '../src/probes/safe-fetch.js';
import { startModernMcpTarget } from './support/mcp-target.js';

// The probe ends the session it opens on a stateful server (security audit, finding 3). The v2
// client transport's close() sends no DELETE, so every probe of a server that keeps sessions (the
// 2025 handshake with Mcp-Session-Id, SDK 1.x with a sessionIdGenerator) left one open there:
// observation probes each server again and again. Now the probe calls terminateSession() first,
// through its own fetch (its limits and deadline).

/** A stateful SDK 1.x server on loopback: one transport per session, DELETE ends it. */
async function startStatefulTarget(json: boolean) {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const requests: { method: string; session: string | null }[] = [];
  const closed: string[] = [];
  const srv = http.createServer((req, res) => void serve(req, res).catch(() => res.destroy()));
  async function serve(req: http.IncomingMessage, res: http.ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
    const sid = (req.headers['mcp-session-id'] as string | undefined) ?? null;
    requests.push({ method: req.method ?? '', session: sid });
    let t = sid ? sessions.get(sid) : undefined;
    if (!t) {
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        onsessioninitialized: (id) => void sessions.set(id, transport),
        onsessionclosed: (id) => {
          sessions.delete(id);
          closed.push(id);
        },
      });
      const s = new Server({ name: 'stateful', version: '1.0.0' }, { capabilities: { tools: {} } });
      s.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [{ name: 'a', inputSchema: { type: 'object' } }] }));
      await s.connect(transport);
      t = transport;
    }
    await t.handleRequest(req, res, body);
  }
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`,
    requests,
    closed,
    /** Sessions the server still keeps. */
    open: () => sessions.size,
    close: () =>
      new Promise<void>((ok) => {
        srv.closeAllConnections();
        srv.close(() => ok());
      }),
  };
}

const fetcher = createSafeFetcher({ allowPrivate: true });

describe('the MCP probe and a stateful server', () => {
  for (const json of [true, false]) {
    it(`ends the session it opened with DELETE, through its own fetch (${json ? 'JSON' : 'SSE'} answers; reading and connecting)`, async () => {
      const target = await startStatefulTarget(json);
      try {
        const exchanges: McpExchange[] = [];
        const m = await readToolManifest(fetcher, target.url, { onExchange: (e) => exchanges.push(e), timeoutMs: 8000 });
        expect(m.tools.map((t) => t.name)).toEqual(['a']);
        const deletes = target.requests.filter((r) => r.method === 'DELETE');
        expect(deletes).toHaveLength(1);
        expect(deletes[0]!.session).toMatch(/^[0-9a-f-]{36}$/);
        expect(target.closed).toEqual([deletes[0]!.session]);
        expect(target.open()).toBe(0);
        // The DELETE went through the probe's fetch (it is one of its exchanges), last.
        expect(exchanges.at(-1)).toMatchObject({ method: 'DELETE', status: 200 });

        // connectMcp (agency checklist, readiness) alike.
        await connectMcp(fetcher, target.url, { timeoutMs: 8000 });
        expect(target.requests.filter((r) => r.method === 'DELETE')).toHaveLength(2);
        expect(target.closed).toHaveLength(2);
        expect(target.open()).toBe(0);
      } finally {
        await target.close();
      }
    }, 30_000);
  }

  it('counts the DELETE against the probe\'s request limit: with no request left it is not sent, and the read stands', async () => {
    const target = await startStatefulTarget(true);
    try {
      const exchanges: McpExchange[] = [];
      await readToolManifest(fetcher, target.url, { onExchange: (e) => exchanges.push(e), timeoutMs: 8000 });
      const used = exchanges.length;
      const before = target.requests.length;
      // Exactly the requests of the read, none for the DELETE.
      const m = await readToolManifest(fetcher, target.url, { requestLimits: { total: used - 1 }, timeoutMs: 8000 });
      expect(m.tools.map((t) => t.name)).toEqual(['a']);
      expect(target.requests.slice(before).filter((r) => r.method === 'DELETE')).toHaveLength(0);
      expect(target.open()).toBe(1);
    } finally {
      await target.close();
    }
  }, 30_000);

  it('sends no DELETE to a stateless 2026-07-28 server (no session)', async () => {
    const target = await startModernMcpTarget([{ name: 'a', inputSchema: { type: 'object' } }]);
    try {
      const exchanges: McpExchange[] = [];
      await readToolManifest(fetcher, target.url, { onExchange: (e) => exchanges.push(e) });
      expect(exchanges.map((e) => e.method)).not.toContain('DELETE');
    } finally {
      await target.close();
    }
  });
});
