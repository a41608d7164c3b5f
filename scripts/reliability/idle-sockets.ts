// Idle-socket exhaustion: run the service with a low open-file limit, open more never-finishing
// connections of every kind than it has descriptors, and prove that it keeps answering (a
// connection opened before the attack keeps writing to the database; new ones get 200 or a 503
// problem), never runs out of descriptors, and closes every such connection after its deadline.
// The attack comes from 60 loopback addresses (60 client networks, each under its per-client
// limit), so it is the connection cap that holds; one more network that opens far more than its
// own limit gets 429 problems or closed connections, never a served slot.
// Loopback only, bounded in count and time. Usage: tsx scripts/reliability/idle-sockets.ts [--postgres]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { overflowFor } from '../../src/http/connection-cap.js';
import { check, havePostgresBinaries, ownPostgres, startService, waitExit } from './harness.js';

const usePostgres = process.argv.includes('--postgres');
const port = 18900 + Math.floor(Math.random() * 500);
const NOFILE = 256;
const PER_CLASS = 40;
// Short deadlines so the script is quick; the defaults (README) differ only in length.
const DEADLINES = {
  HTTP_FIRST_BYTE_TIMEOUT_MS: '2000',
  HTTP_HEADERS_TIMEOUT_MS: '2000',
  HTTP_REQUEST_TIMEOUT_MS: '4000',
  HTTP_IDLE_TIMEOUT_MS: '2000',
  HTTP2_SESSION_IDLE_TIMEOUT_MS: '2000',
};
// Longest deadline + node's 1 s keep-alive margin + the 2 s linger after our FIN + checking intervals, doubled for a loaded machine.
const RELEASE_BOUND_MS = 2 * (4000 + 1000 + 2000 + 1000);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const fdCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;
/** Descriptors of the service that are sockets (database files opened meanwhile do not count). */
function socketFds(pid: number): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n++;
    } catch {
      /* closed meanwhile */
    }
  }
  return n;
}
/** Connections on the service's port that still hold a descriptor in the service (ss -p names the owner). */
function heldConnections(pid: number): number {
  const r = spawnSync('ss', ['-Htnp', `( sport = :${port} )`], { encoding: 'utf8' });
  if (r.status !== 0) return -1;
  return r.stdout.split('\n').filter((l) => l.includes(`pid=${pid},`)).length;
}
function serverSockets(state?: string): number {
  const args = ['-Htn', ...(state ? ['state', state] : []), `( sport = :${port} )`];
  const r = spawnSync('ss', args, { encoding: 'utf8' });
  if (r.status !== 0) return -1;
  return r.stdout.split('\n').filter((l) => l.trim()).length;
}

/** The loopback address attacking connection k comes from: 60 client networks, 127.1.0.1 to 127.1.0.60. */
const attacker = (k: number) => `127.1.0.${1 + (k % 60)}`;
/** One client network that opens far more than its per-client limit. */
const GREEDY = '127.2.0.1';

/** A raw connection from `from` that sends `bytes` (maybe nothing) and never closes on its own. */
function raw(from: string, bytes?: string): Promise<net.Socket> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true, localAddress: from });
    s.on('error', () => {});
    s.once('connect', () => {
      if (bytes) s.write(bytes);
      resolve(s);
    });
    s.once('close', () => resolve(s));
  });
}

/** An h2c session that made one request and then idles, or that leaves a request body half-sent. */
function h2(from: string, kind: 'idle' | 'half-body'): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve) => {
    const session = http2.connect(`http://127.0.0.1:${port}`, { createConnection: () => net.connect({ port, host: '127.0.0.1', localAddress: from }) });
    session.on('error', () => resolve(session));
    if (kind === 'idle') {
      const req = session.request({ ':path': '/healthz' });
      req.on('error', () => resolve(session));
      req.resume();
      req.on('end', () => resolve(session));
    } else {
      const req = session.request({ ':method': 'POST', ':path': '/api/report', 'content-type': 'application/json', 'content-length': '500' });
      req.on('error', () => {});
      req.write('{"server_url":', () => resolve(session));
    }
  });
}

/** One request on a connection of its own; the status, or 0 when the connection was closed without an answer. */
function freshGet(path: string, from = '127.0.0.1'): Promise<{ status: number; problem: boolean; retryAfter: string | null; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 10_000, localAddress: from }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, problem: (res.headers['content-type'] ?? '').startsWith('application/problem+json'), retryAfter: (res.headers['retry-after'] as string) ?? null, ms: Date.now() - t0 }));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve({ status: 0, problem: false, retryAfter: null, ms: Date.now() - t0 }));
  });
}

async function main() {
  if (spawnSync('prlimit', ['--version']).status !== 0) {
    process.stdout.write('SKIP idle-socket exhaustion: prlimit is not available\n');
    return;
  }
  if (usePostgres && !havePostgresBinaries()) {
    process.stdout.write('SKIP idle-socket exhaustion on PostgreSQL: initdb/runuser not available\n');
    return;
  }
  const pgInst = usePostgres ? ownPostgres(port + 1000) : null;
  const dataDir = usePostgres ? null : mkdtempSync(join(tmpdir(), 'obs-idle-'));
  const env: Record<string, string> = { ...DEADLINES, OBSERVE_ENABLED: '0', ...(pgInst ? { DATABASE_URL: pgInst.url } : { DATA_DIR: dataDir! }) };
  const attack: { close(): void }[] = [];
  try {
    pgInst?.start();
    const svc = await startService(env, port, ['prlimit', `--nofile=${NOFILE}`]);
    const pid = svc.child.pid!;
    const cap = /"max_connections":(\d+)/.exec(svc.logs())?.[1];
    const baseline = fdCount(pid);
    process.stdout.write(`${usePostgres ? 'PostgreSQL' : 'PGlite'}: open-file limit ${NOFILE}, ${baseline} descriptors in use after start, connection cap ${cap}\n`);

    // A client that was already connected before the attack (keep-alive), like a busy agent.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const report = (tag: string) =>
      new Promise<number>((resolve) => {
        const body = JSON.stringify({ server_url: 'https://idle-sockets.example.com/mcp', success: true, latency_ms: 7, tool_name: tag });
        const req = http.request({ host: '127.0.0.1', port, path: '/api/report', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', () => resolve(0));
        req.end(body);
      });
    check((await report('before')) === 200, 'a report is stored before the attack');
    // An MCP call on the same connection: a stateless tools/list (MCP 2025-06-18 header, no session).
    const mcpToolsList = () =>
      new Promise<{ status: number; tools: number }>((resolve) => {
        const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
        const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', 'content-length': Buffer.byteLength(body) };
        const req = http.request({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', agent, headers }, (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => {
            const json = /\{.*\}/s.exec(text)?.[0];
            let tools = 0;
            try {
              tools = (JSON.parse(json ?? '{}') as { result?: { tools?: unknown[] } }).result?.tools?.length ?? 0;
            } catch {
              tools = 0;
            }
            resolve({ status: res.statusCode ?? 0, tools });
          });
        });
        req.on('error', () => resolve({ status: 0, tools: 0 }));
        req.end(body);
      });
    // The keep-alive connection above (held by the service until its idle deadline).
    const baseHeld = heldConnections(pid);

    // It stays busy (one report every 250 ms, so its connection is never idle) through the attack.
    const busy = { ok: 0, failed: [] as number[], running: true };
    const busyLoop = (async () => {
      for (let i = 0; busy.running; i++) {
        const status = await report(`during-${i}`);
        if (status === 200) busy.ok++;
        else busy.failed.push(status);
        await sleep(250);
      }
    })();

    const t0 = Date.now();
    const rawConn = async (from: string, bytes?: string) => {
      const s = await raw(from, bytes);
      return { close: () => s.destroy() };
    };
    const classes: [string, (from: string) => Promise<{ close(): void }>][] = [
      ['silent', (from) => rawConn(from)],
      ['lone "PR"', (from) => rawConn(from, 'PR')],
      ['stalled HTTP/2 preface', (from) => rawConn(from, 'PRI * HTTP/2.0\r\n')],
      ['half-sent HTTP/1.1 head', (from) => rawConn(from, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ')],
      ['half-sent HTTP/1.1 body', (from) => rawConn(from, 'POST /api/report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"server_url":')],
      ['idle HTTP/1.1 keep-alive', (from) => rawConn(from, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')],
      ['idle h2c session', async (from) => { const s = await h2(from, 'idle'); return { close: () => s.destroy() }; }],
      ['half-sent HTTP/2 body', async (from) => { const s = await h2(from, 'half-body'); return { close: () => s.destroy() }; }],
    ];
    // First, one network alone, far past its own limit (MAX_CONNECTIONS_PER_CLIENT, derived: an
    // eighth of the cap, at least 16): beyond it, answered 429 or closed at accept.
    for (let i = 0; i < 40; i++) attack.push(await rawConn(GREEDY));
    // FIN right away on a fresh, undecided connection: must not leave CLOSE-WAIT behind.
    let k = 0;
    for (let i = 0; i < PER_CLASS; i++) (await raw(attacker(k++))).end();
    for (let i = 0; i < PER_CLASS; i++) for (const [, open] of classes) attack.push(await open(attacker(k++)));
    const opened = PER_CLASS * (classes.length + 1) + 40;
    await sleep(500);
    const fdsUnderAttack = fdCount(pid);
    process.stdout.write(`opened ${opened} never-finishing connections in ${Date.now() - t0} ms; service descriptors ${fdsUnderAttack}/${NOFILE} (${socketFds(pid)} sockets), connections held ${heldConnections(pid)}\n`);

    check(svc.child.exitCode === null, 'the service is still running under the attack');
    check(fdsUnderAttack < NOFILE, `descriptors stay below the limit under the attack (${fdsUnderAttack} < ${NOFILE})`);
    busy.running = false;
    await busyLoop;
    // The first MCP call of this process comes while descriptors are nearly all taken: nothing it
    // needs may still have to be opened from disk (a module load failing with EMFILE stays failed).
    const mcpDuring = await mcpToolsList();
    check(mcpDuring.status === 200 && mcpDuring.tools > 0, `an MCP tools/list on the busy connection is answered during the attack (${JSON.stringify(mcpDuring)})`);
    check(busy.ok > 0 && busy.failed.length === 0, `the busy connection opened before the attack stored every report during it (${busy.ok} stored, failures ${JSON.stringify(busy.failed)})`);
    const fresh = await Promise.all(Array.from({ length: 10 }, () => freshGet('/readyz')));
    process.stdout.write(`new connections during the attack (status, 0 = closed at accept; ms): ${JSON.stringify(fresh.map((r) => [r.status, r.ms]))}\n`);
    // "At once": well inside the client's 10 s timeout, which a hanging connection would reach.
    const fine = (r: (typeof fresh)[number]) => r.status === 200 || (r.status === 503 && r.problem && r.retryAfter !== null) || (r.status === 0 && r.ms < 5_000);
    check(fresh.every(fine), 'new connections during the attack get 200, or 503 problem+json with Retry-After, or are closed at once (never a hang)');
    const greedy = await Promise.all(Array.from({ length: 5 }, () => freshGet('/readyz', GREEDY)));
    process.stdout.write(`new connections from the network past its own limit (status; ms): ${JSON.stringify(greedy.map((r) => [r.status, r.ms]))}\n`);
    const refusedOwn = (r: (typeof greedy)[number]) => (r.status === 429 && r.problem && r.retryAfter !== null) || (r.status === 0 && r.ms < 5_000);
    check(greedy.every(refusedOwn), 'a network holding its per-client limit gets 429 problem+json with Retry-After, or its new connections are closed at once (never served, never a hang)');

    const until = Date.now() + RELEASE_BOUND_MS;
    // At most the keep-alive client's own connection remains (it may have reconnected meanwhile).
    const settled = () => heldConnections(pid) <= Math.max(1, baseHeld);
    while (Date.now() < until && !settled()) await sleep(250);
    const releasedAfter = Date.now() - t0;
    const held = heldConnections(pid);
    // Kernel-side states of the server port; FIN-WAIT-2 entries after the service closed are orphans
    // without a descriptor, kept by the kernel until the client's FIN or tcp_fin_timeout.
    const states: Record<string, number> = {};
    for (const l of spawnSync('ss', ['-Htn', `( sport = :${port} )`], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean)) {
      const st = l.split(/\s+/)[0]!;
      states[st] = (states[st] ?? 0) + 1;
    }
    const closeWait = serverSockets('close-wait');
    process.stdout.write(
      `after the deadlines (${releasedAfter} ms after the attack began): connections held by the service ${held} (before the attack ${baseHeld}), socket descriptors ${socketFds(pid)}, all descriptors ${fdCount(pid)}, server-port TCP states ${JSON.stringify(states)}\n`,
    );
    check(held >= 0 && settled(), `every attacking connection was closed by the service (connections it holds: ${held}, before the attack ${baseHeld})`);
    check(closeWait === 0, 'no CLOSE-WAIT socket is left');

    const after = await Promise.all(Array.from({ length: 5 }, () => freshGet('/readyz')));
    check(after.every((r) => r.status === 200), `new connections are served again: ${JSON.stringify(after.map((r) => r.status))}`);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const perClientCap = Number(/observatory_http_connections\{state="per_client_cap"\} (\d+)/.exec(metrics)?.[1]);
    const perClientRefused = [...metrics.matchAll(/observatory_http_connections_refused_per_client_total\{how="(?:answered|dropped)"\} (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
    // Those past the limit and its overflow are closed at accept (the overflow's silent ones only time out).
    const closedAtAccept = 40 - perClientCap - overflowFor(perClientCap);
    check(perClientCap >= 16 && perClientRefused >= closedAtAccept, `the network past its own limit was held to it (per-client limit ${perClientCap}; ${perClientRefused} of its 40 connections refused, at least ${closedAtAccept} expected; /metrics)`);
    check((await report('after')) === 200, 'reports are stored after the attack');
    const mcpAfter = await mcpToolsList();
    check(mcpAfter.status === 200 && mcpAfter.tools > 0, `MCP tools/list is answered after the attack (${JSON.stringify(mcpAfter)})`);
    agent.destroy();

    svc.child.kill('SIGTERM');
    check((await waitExit(svc.child)) === 0, 'the service shuts down cleanly afterwards');
  } finally {
    for (const a of attack) a.close();
    pgInst?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
