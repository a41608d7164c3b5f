import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MCP_REQUEST_LIMITS, readToolManifest } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher, ProbeFailed } from '../src/probes/safe-fetch.js';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { startMcpTarget } from './support/mcp-target.js';

// A hostile MCP server must not make one probe fan out (docs/probes.md "The MCP probe", limits).
// The official SDK client answers every server-to-client JSON-RPC request (ping, sampling, ...)
// with its own POST, unawaited; through the safe client each POST is a new socket. A server that
// answers initialize with an SSE body of 5,000 pings (50 bytes each, far under the 1 MiB cap)
// made one probe open thousands of connections. Every packet here goes to 127.0.0.1.

interface Hostile {
  url: string;
  /** TCP connections the server accepted. */
  connections: number;
  /** Requests open at the same time, at most. */
  maxOpen: number;
  /** POSTs that carried the client's answers to the server's requests. */
  answers: number;
  /** JSON-RPC methods of the client's requests, in order. */
  methods: string[];
  close(): Promise<void>;
}

/**
 * An MCP server (2025 handshake over Streamable HTTP, JSON-RPC written by hand) that puts `pings`
 * server-to-client ping requests into the SSE answer of every client request (or of those whose
 * method is in `pingsOn`) before the answer itself. With `waitForAnswers`, it holds the answer until every ping was answered (as a server
 * that needs its requests answered would), and delays each 202 by `answerDelayMs`. `onPost`
 * may answer a POST itself (returns true when it did).
 */
async function startHostile(opts: { pings: number; pingsOn?: string[]; waitForAnswers?: boolean; answerDelayMs?: number; onPost?: (req: http.IncomingMessage, res: http.ServerResponse, msg: Record<string, unknown>) => boolean }): Promise<Hostile> {
  let nextPing = 1;
  const pending = new Map<number, () => void>();
  const state = { connections: 0, open: 0, maxOpen: 0, answers: 0, methods: [] as string[] };
  const srv = http.createServer((req, res) => {
    state.open++;
    state.maxOpen = Math.max(state.maxOpen, state.open);
    res.on('close', () => state.open--);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      if (req.method !== 'POST') return void res.writeHead(405).end();
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(body) as Record<string, unknown>;
      } catch {
        return void res.writeHead(400).end();
      }
      if (opts.onPost?.(req, res, msg)) return;
      if (msg.method === undefined) {
        // The client's answer to one of our pings.
        state.answers++;
        const done = pending.get(Number(msg.id));
        pending.delete(Number(msg.id));
        setTimeout(() => {
          res.writeHead(202).end();
          done?.();
        }, opts.answerDelayMs ?? 0);
        return;
      }
      state.methods.push(String(msg.method));
      if (msg.id === undefined) return void res.writeHead(202).end();
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const answered: Promise<void>[] = [];
      let events = '';
      // (The SDK answers nothing while it probes with server/discover: a server waiting for
      // answers there would wait for ever, so such a server pings only after it.)
      const pings = !opts.pingsOn || opts.pingsOn.includes(String(msg.method)) ? opts.pings : 0;
      for (let i = 0; i < pings; i++) {
        const id = nextPing++;
        answered.push(new Promise<void>((r) => pending.set(id, r)));
        events += `data: {"jsonrpc":"2.0","id":${id},"method":"ping"}\n\n`;
      }
      res.write(events);
      const answer =
        msg.method === 'initialize'
          ? { jsonrpc: '2.0', id: msg.id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1.0.0' } } }
          : msg.method === 'tools/list'
            ? { jsonrpc: '2.0', id: msg.id, result: { tools: [{ name: 'echo', inputSchema: { type: 'object' } }] } }
            : { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } };
      const finish = () => res.end(`data: ${JSON.stringify(answer)}\n\n`);
      if (opts.waitForAnswers) void Promise.all(answered).then(finish);
      else finish();
    });
  });
  srv.on('connection', () => state.connections++);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`,
    get connections() {
      return state.connections;
    },
    get maxOpen() {
      return state.maxOpen;
    },
    get answers() {
      return state.answers;
    },
    methods: state.methods,
    async close() {
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    },
  };
}

/** A plain server on another loopback port (another origin) that counts what reaches it. */
async function startElsewhere() {
  const seen: { method: string; body: string }[] = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', body });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/reflect`,
    seen,
    async close() {
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    },
  };
}

const fetcher = createSafeFetcher({ allowPrivate: true });
const probeError = (url: string, o: Parameters<typeof readToolManifest>[2] = {}) => readToolManifest(fetcher, url, o).then(() => null, (e: unknown) => e);

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

describe('an MCP server flooding the probe with server-to-client requests', () => {
  it.each([
    ['every answer, server/discover first', undefined],
    ['the answer to initialize (the client answers pings from there on)', ['initialize']],
  ])('5,000 pings in the SSE body of %s: the probe stops after a few, with a bounded number of connections', async (_, pingsOn) => {
    const h = await startHostile({ pings: 5000, pingsOn });
    try {
      const started = performance.now();
      const err = await probeError(h.url);
      expect(err).toBeInstanceOf(ProbeFailed);
      expect((err as ProbeFailed).message).toMatch(new RegExp(`more than ${MCP_REQUEST_LIMITS.serverRequests} requests`));
      // Settle: nothing the probe started may still be on its way.
      await new Promise((r) => setTimeout(r, 300));
      expect(h.answers).toBeLessThanOrEqual(MCP_REQUEST_LIMITS.serverRequests);
      expect(h.connections).toBeLessThanOrEqual(MCP_REQUEST_LIMITS.total);
      expect(h.connections).toBeLessThan(20);
      expect(h.maxOpen).toBeLessThanOrEqual(MCP_REQUEST_LIMITS.inFlight);
      expect(performance.now() - started).toBeLessThan(10_000);
    } finally {
      await h.close();
    }
  }, 60_000);

  it('the same server behind GET /api/drift: 502 upstream_error naming the limit', async () => {
    const h = await startHostile({ pings: 5000 });
    try {
      expect((await postJson(`${t.base}/api/report`, { server_url: h.url, success: true, latency_ms: 5 })).status).toBe(200);
      const res = await fetch(`${t.base}/api/drift?server=${encodeURIComponent(h.url)}`);
      const body = await expectProblem(res, 502, 'upstream_error');
      expect(String(body.detail)).toMatch(/more than \d+ requests/);
      await new Promise((r) => setTimeout(r, 300));
      expect(h.connections).toBeLessThan(20);
    } finally {
      await h.close();
    }
  }, 60_000);

  it(`a server that waits for its few pings to be answered is served, never more than ${MCP_REQUEST_LIMITS.inFlight} requests at once`, async () => {
    // Seven pings, all answered before initialize is: without the bound, eight requests at once.
    const h = await startHostile({ pings: 7, pingsOn: ['initialize'], waitForAnswers: true, answerDelayMs: 150 });
    try {
      const m = await readToolManifest(fetcher, h.url);
      expect(m.tools.map((x) => x.name)).toEqual(['echo']);
      expect(h.answers).toBe(7);
      expect(h.maxOpen).toBeLessThanOrEqual(MCP_REQUEST_LIMITS.inFlight);
    } finally {
      await h.close();
    }
  }, 60_000);

  it('the total per probe is bounded too, whatever makes the client send', async () => {
    // A well-behaved server with 3 pages of tools takes 6 requests or more; a budget of 4 stops it.
    const target = await startMcpTarget(
      ['a', 'b', 'c', 'd', 'e', 'f'].map((name) => ({ name, inputSchema: { type: 'object' as const } })),
      2,
    );
    try {
      const err = await probeError(target.url, { requestLimits: { total: 4 } });
      expect(err).toBeInstanceOf(ProbeFailed);
      expect((err as ProbeFailed).message).toMatch(/more than 4 requests/);
      expect((await readToolManifest(fetcher, target.url)).tools).toHaveLength(6);
    } finally {
      await target.close();
    }
  }, 60_000);
});

describe(`redirects of the probe's POSTs (${backend})`, () => {
  it('a 307 of a POST to another origin is refused, and its body never re-sent there', async () => {
    const elsewhere = await startElsewhere();
    const h = await startHostile({
      pings: 0,
      onPost: (_req, res, msg) => {
        if (msg.method !== 'initialize') return false;
        res.writeHead(307, { location: elsewhere.url }).end();
        return true;
      },
    });
    try {
      const err = await probeError(h.url);
      expect(err).toBeInstanceOf(ProbeFailed);
      expect((err as ProbeFailed).message).toMatch(/redirect.*another origin/);
      expect(elsewhere.seen).toEqual([]);
      expect((await postJson(`${t.base}/api/report`, { server_url: h.url, success: true, latency_ms: 5 })).status).toBe(200);
      const body = await expectProblem(await fetch(`${t.base}/api/drift?server=${encodeURIComponent(h.url)}`), 502, 'upstream_error');
      expect(String(body.detail)).toMatch(/another origin/);
      expect(elsewhere.seen).toEqual([]);
    } finally {
      await h.close();
      await elsewhere.close();
    }
  }, 60_000);

  it("a 307 of the client's answers to the server's pings, to another origin, reflects nothing", async () => {
    const elsewhere = await startElsewhere();
    const h = await startHostile({
      pings: 50,
      onPost: (_req, res, msg) => {
        if (msg.method !== undefined) return false;
        res.writeHead(307, { location: elsewhere.url }).end();
        return true;
      },
    });
    try {
      const err = await probeError(h.url);
      expect(err).toBeInstanceOf(ProbeFailed);
      await new Promise((r) => setTimeout(r, 300));
      expect(elsewhere.seen).toEqual([]);
    } finally {
      await h.close();
      await elsewhere.close();
    }
  }, 60_000);

  it('a 303 of a POST to another origin is not followed either (MCP POSTs stay on their origin)', async () => {
    const elsewhere = await startElsewhere();
    const h = await startHostile({
      pings: 0,
      onPost: (_req, res, msg) => {
        if (msg.method !== 'initialize') return false;
        res.writeHead(303, { location: elsewhere.url }).end();
        return true;
      },
    });
    try {
      const err = await probeError(h.url);
      expect(err).toBeInstanceOf(ProbeFailed);
      expect((err as ProbeFailed).message).toMatch(/another origin/);
      expect(elsewhere.seen).toEqual([]);
    } finally {
      await h.close();
      await elsewhere.close();
    }
  }, 60_000);
});
