// Shared pieces of the reliability scripts: run the service as a real child process, drive
// POST /api/report with uniquely tagged reports, and own a throwaway PostgreSQL instance.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface Service {
  child: ChildProcess;
  base: string;
  logs: () => string;
}

/**
 * Production settings, as an operator runs the service: NODE_ENV=production (which requires the
 * key-encryption secret) and one secret for the whole script, so a restart on the same data
 * opens the sealed signing key again.
 */
const PRODUCTION_ENV = { NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') };

// Every script is bounded: one that outlives RELIABILITY_SCRIPT_TIMEOUT_MS (default 10 min; each
// takes well under one) fails, kills the services it started and stops the PostgreSQL instances it
// owns, instead of holding CI until its own limit. Waits inside a script are bounded too
// (startService, waitExit), so this is the last line, not the usual way out.
const services = new Set<ChildProcess>();
const instances = new Set<{ destroy(): void }>();
const SCRIPT_TIMEOUT_MS = Number(process.env.RELIABILITY_SCRIPT_TIMEOUT_MS ?? 600_000);
setTimeout(() => {
  process.stdout.write(`FAIL the script did not finish within ${SCRIPT_TIMEOUT_MS} ms\n`);
  for (const c of services) c.kill('SIGKILL');
  for (const i of instances) i.destroy();
  process.exit(1);
}, SCRIPT_TIMEOUT_MS).unref();

/** `wrap` runs the service under another command that execs it, e.g. ['prlimit', '--nofile=256'] (same pid). */
export async function startService(env: Record<string, string>, port: number, wrap: string[] = []): Promise<Service> {
  const argv = [...wrap, process.execPath, '--import', 'tsx', 'src/main.ts'];
  const child = spawn(argv[0]!, argv.slice(1), {
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info', ...PRODUCTION_ENV, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  services.add(child);
  child.once('exit', () => services.delete(child));
  let logs = '';
  child.stdout!.on('data', (d: Buffer) => (logs += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (logs += d.toString()));
  const base = `http://127.0.0.1:${port}`;
  // Generous: on a loaded 2-core machine tsx and the migrations can take a minute or more.
  for (const until = Date.now() + 180_000; Date.now() < until; ) {
    if (child.exitCode !== null) throw new Error(`service exited during start:\n${logs}`);
    if (await fetch(`${base}/healthz`).then((r) => r.ok, () => false)) return { child, base, logs: () => logs };
    await new Promise((r) => setTimeout(r, 250));
  }
  child.kill('SIGKILL');
  throw new Error(`service did not start:\n${logs}`);
}

/**
 * The child's exit code once it exits. One still running after `ms` (the service's own shutdown
 * is bounded at 15 s) is killed, reported as a failed check, and answers null.
 */
export function waitExit(child: ChildProcess, ms = 30_000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      check(false, `process ${child.pid} exits within ${ms} ms (killed)`);
      child.kill('SIGKILL');
      resolve(null);
    }, ms);
    child.once('exit', (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
}

export interface LoadResult {
  acked: Set<string>;
  statuses: Map<number, number>;
  slowestNon200Ms: number;
  problems: { status: number; contentType: string; retryAfter: string | null }[];
}

/**
 * Sends reports with a unique tool_name tag each, `concurrency` at a time, until stop() is
 * called. A tag is "acknowledged" when its POST answered 200.
 */
export function driveReports(base: string, tagPrefix: string, concurrency = 20) {
  let running = true;
  let n = 0;
  const res: LoadResult = { acked: new Set(), statuses: new Map(), slowestNon200Ms: 0, problems: [] };
  const worker = async () => {
    while (running) {
      const tag = `${tagPrefix}-${n++}`;
      const t0 = performance.now();
      try {
        const r = await fetch(`${base}/api/report`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ server_url: `https://reliability-${n % 10}.example.com/mcp`, success: true, latency_ms: 12, tool_name: tag }),
          signal: AbortSignal.timeout(15_000),
        });
        await r.arrayBuffer();
        res.statuses.set(r.status, (res.statuses.get(r.status) ?? 0) + 1);
        if (r.status === 200) res.acked.add(tag);
        else {
          res.slowestNon200Ms = Math.max(res.slowestNon200Ms, performance.now() - t0);
          if (res.problems.length < 1000) res.problems.push({ status: r.status, contentType: r.headers.get('content-type') ?? '', retryAfter: r.headers.get('retry-after') });
        }
      } catch {
        res.statuses.set(0, (res.statuses.get(0) ?? 0) + 1); // connection refused/reset: not acknowledged
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  return {
    result: res,
    async stop() {
      running = false;
      await Promise.all(workers);
      return res;
    },
  };
}

/** Tags of every stored report whose tool_name starts with the prefix. */
export async function storedTags(db: { query<T>(sql: string, params?: unknown[]): Promise<T[]> }, prefix: string): Promise<Set<string>> {
  const rows = await db.query<{ tool_name: string }>('SELECT tool_name FROM telemetry WHERE tool_name LIKE $1', [`${prefix}-%`]);
  return new Set(rows.map((r) => r.tool_name));
}

export function check(ok: boolean, what: string): void {
  process.stdout.write(`${ok ? 'PASS' : 'FAIL'} ${what}\n`);
  if (!ok) process.exitCode = 1;
}

const PG_BIN = '/usr/lib/postgresql/15/bin';

/** A PostgreSQL instance this script owns (never the machine's shared cluster). */
export function ownPostgres(port: number) {
  const dir = mkdtempSync(join(tmpdir(), 'obs-pg-'));
  chmodSync(dir, 0o755);
  const data = join(dir, 'data');
  const asPostgres = (args: string[]) => {
    const r = spawnSync('runuser', ['-u', 'postgres', '--', ...args], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${args.join(' ')} failed: ${r.stderr || r.stdout}`);
  };
  chownSync(dir, 101, 104);
  try {
    const uid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    chownSync(dir, uid, gid);
  } catch {
    /* keep the default ids above */
  }
  asPostgres([`${PG_BIN}/initdb`, '-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=on`;
  const instance = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start: () => asPostgres([`${PG_BIN}/pg_ctl`, '-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', 'start']),
    stop: () => asPostgres([`${PG_BIN}/pg_ctl`, '-D', data, '-m', 'immediate', '-w', 'stop']),
    destroy() {
      instances.delete(instance);
      try {
        this.stop();
      } catch {
        /* already stopped */
      }
      rmSync(dir, { recursive: true, force: true });
    },
    client: () => new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, max: 2 }),
  };
  instances.add(instance);
  return instance;
}

export function havePostgresBinaries(): boolean {
  return spawnSync(`${PG_BIN}/initdb`, ['--version']).status === 0 && spawnSync('runuser', ['--help']).status === 0;
}
