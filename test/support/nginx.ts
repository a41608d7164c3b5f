import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

// A real nginx (Debian's package) and a real MCP server (official SDK) for the gate tests
// (test/gateway.nginx.test.ts, test/bundle.nginx.test.ts): one set-up, shared.

export function findNginx(): string | null {
  for (const p of ['nginx', '/usr/sbin/nginx']) {
    try {
      execFileSync(p, ['-v'], { stdio: 'ignore' });
      return p;
    } catch {
      /* not here */
    }
  }
  return null;
}

/** How long nginx may take to answer on its port after spawning (generous: the machine may be loaded). */
export const NGINX_START_MS = 60_000;

export async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** An MCP server (stateless Streamable HTTP) on every path, with one tool. */
export async function startMcpServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    const mcp = new McpServer({ name: `upstream${req.url ?? ''}`, version: '1.0.0' });
    mcp.registerTool('echo', { description: 'Echoes its text', inputSchema: { text: z.string() } }, async ({ text }) => ({
      content: [{ type: 'text', text: `echo: ${text}` }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void mcp.close();
    });
    mcp
      .connect(transport)
      .then(() => transport.handleRequest(req, res))
      .catch(() => {
        if (!res.headersSent) res.writeHead(500).end();
      });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port };
}

/** What a gate configuration adds beyond the three standard locations. */
export interface GateConfOptions {
  /** Gate answer headers copied to the client's response. */
  passHeaders: string[];
  /** Gate answer headers also sent on to the upstream MCP server. */
  forwardHeaders?: string[];
  /** More locations, each with its own upstream: `mcpServer` is the URL the gate judges. */
  extraLocations?: { prefix: string; mcpServer: string; upstream: string }[];
}

/**
 * nginx with auth_request to `gate`/v1/gate in front of `upstream`: /pass/ and /fail/ name their
 * upstream MCP server in X-Mcp-Server (subrequests share the parent's variables), /anon/ only the
 * URL the client called, so the gate judges the gateway URL itself.
 */
export function nginxGateConf(dir: string, port: number, gate: string, upstream: string, o: GateConfOptions): string {
  const varName = (h: string) => h.toLowerCase().replace(/-/g, '_');
  const gateVar = (h: string) => `$gate_${varName(h)}`;
  const copy = [
    ...o.passHeaders.map((h) => `auth_request_set ${gateVar(h)} $upstream_http_${varName(h)};\n      add_header ${h} ${gateVar(h)} always;`),
    ...(o.forwardHeaders ?? []).map((h) => `proxy_set_header ${h} ${gateVar(h)};`),
  ].join('\n      ');
  const location = (prefix: string, mcpServer: string, to = upstream) => `
    location ${prefix} {
      set $mcp_server "${mcpServer}";
      auth_request /_trust_gate;
      ${copy}
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_pass ${to};
    }`;
  const extra = (o.extraLocations ?? []).map((l) => location(l.prefix, l.mcpServer, l.upstream)).join('\n    ');
  return `
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 128; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server {
    listen 127.0.0.1:${port};
    server_name 127.0.0.1;
    ${location('/pass/', `${upstream}/pass/mcp`)}
    ${location('/fail/', `${upstream}/fail/mcp`)}
    ${location('/anon/', '')}
    ${extra}
    location = /_trust_gate {
      internal;
      proxy_pass ${gate}/v1/gate;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      # Every upstream header is set here, so none a client sent reaches the gate (an empty
      # value drops the header, the client's copy included).
      proxy_set_header X-Mcp-Server $mcp_server;
      # The gateway's own name, never the client's Host ($http_host, $host).
      proxy_set_header X-Original-URL $scheme://$server_name:$server_port$request_uri;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $server_name:$server_port;
      proxy_set_header X-Original-URI $request_uri;
    }
  }
}
`;
}

/** Starts nginx with `conf` in a fresh directory; resolves once it answers on its port. */
export async function startNginx(bin: string, confFor: (dir: string, port: number) => string): Promise<{ proc: ChildProcess; dir: string; base: string; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'nginx-gate-'));
  for (const d of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  writeFileSync(join(dir, 'nginx.conf'), confFor(dir, port));
  const proc = spawn(bin, ['-c', join(dir, 'nginx.conf'), '-p', dir, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const deadline = Date.now() + NGINX_START_MS;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
    const ok = await fetch(`${base}/none`).then(
      () => true,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`nginx did not start within ${NGINX_START_MS / 1000} s: ${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc,
    dir,
    base,
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
    },
  };
}
