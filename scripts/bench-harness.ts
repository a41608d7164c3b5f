// Shared by the bench scripts: child processes (service, ceiling) and autocannon runs.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';

export const DURATION = Number(process.env.BENCH_SECONDS ?? 10);
export const WARMUP = 2;
export const CONNECTIONS = 50;

/**
 * What a production deployment sets (README "Configuration"): the benchmark measures that, without
 * the development-only transaction guard, with private keys sealed under a secret of this run.
 */
const PRODUCTION_ENV = { NODE_ENV: 'production', KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64') };

export function startChild(script: string, env: Record<string, string>, nodeArgs: string[] = []): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', script], { env: { ...process.env, ...PRODUCTION_ENV, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
    const deadline = setTimeout(() => reject(new Error(`${script} did not start`)), 120_000);
    const poll = async () => {
      const ok = await fetch(`http://127.0.0.1:${env.PORT}${script.includes('ceiling') ? '/fixed' : '/readyz'}`).then((r) => r.ok, () => false);
      if (ok) {
        clearTimeout(deadline);
        child.removeAllListeners('exit');
        resolve(child);
      } else setTimeout(poll, 200);
    };
    void poll();
  });
}

export function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    const force = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('exit', () => {
      clearTimeout(force);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

export const load1 = () => Math.round(loadavg()[0]! * 10) / 10;

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ: 100 on Linux). */
const USER_HZ = 100;

/** CPU time (user + system, ms) a process has used so far; NaN where /proc cannot tell. */
export function processCpuMs(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start after its closing parenthesis.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / USER_HZ;
  } catch {
    return NaN;
  }
}

/**
 * CPU time (ms) used so far by the local PostgreSQL server for this bench: the backends connected
 * to `database` (cpuWatch.database) and the server's own background processes (WAL writer,
 * checkpointer, autovacuum...), not the backends of other databases on the same server.
 */
export function postgresCpuMs(database = cpuWatch.database): number {
  let sum = 0;
  let any = false;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (!stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')).startsWith('postgres')) continue;
      const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8');
      const backend = /\d+\.\d+\.\d+\.\d+\(\d+\)|\[local\]/.test(cmd);
      if (backend && (database === undefined || !cmd.includes(` ${database} `))) continue;
      sum += processCpuMs(Number(d));
      any = true;
    } catch {
      // gone meanwhile
    }
  }
  return any ? sum : NaN;
}

/** Processes whose CPU time each measurement records (set by the bench once its children run). */
export const cpuWatch: { service?: number; ceiling?: number; database?: string } = {};

export interface CpuUse {
  /** CPU ms used during the measured run (warm-up excluded) by the service, the ceiling and PostgreSQL. */
  service: number;
  ceiling: number;
  postgres: number;
  /** Wall ms of the measured run. */
  wallMs: number;
}

export function cpuWindow(): () => CpuUse {
  const t0 = performance.now();
  const s0 = processCpuMs(cpuWatch.service);
  const c0 = processCpuMs(cpuWatch.ceiling);
  const p0 = postgresCpuMs();
  return () => ({ service: processCpuMs(cpuWatch.service) - s0, ceiling: processCpuMs(cpuWatch.ceiling) - c0, postgres: postgresCpuMs() - p0, wallMs: performance.now() - t0 });
}

export async function measure(opts: autocannon.Options, warmup = WARMUP): Promise<autocannon.Result & { load: number; cpu: CpuUse }> {
  if (warmup > 0) await autocannon({ connections: CONNECTIONS, ...opts, duration: warmup });
  const load = load1();
  const done = cpuWindow();
  const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
  return Object.assign(r, { load, cpu: done() });
}


/** A bare GET ceiling at or below this much CPU per request (µs) is a quiet host's (docs/performance.md "Fifth pass": 12-18 µs). */
export const QUIET_CEILING_CPU_US = 20;

/**
 * One sentence for a bench block saying how fast the host was, from the CPU per request of the
 * run's bare GET ceilings (median): on a slow host the service's ratios fall further than its
 * ceilings (every socket write that wakes the load generator costs more), so such a run's
 * ratios cannot be held against the targets the way a quiet host's can.
 */
export function hostSpeedNote(bareGetCpuUs: readonly number[]): string {
  const known = bareGetCpuUs.filter((u) => Number.isFinite(u) && u > 0).sort((a, b) => a - b);
  if (known.length === 0) return 'Host speed unknown (no bare GET ceiling with a CPU measurement in this run).';
  const median = known[Math.floor((known.length - 1) / 2)]!;
  const figure = `the bare GET ceiling spent ${median.toFixed(1)} µs of CPU per request (median of ${known.length})`;
  return median <= QUIET_CEILING_CPU_US
    ? `Quiet host: ${figure}, within a quiet host's 12-18 µs.`
    : `**Slow host**: ${figure}, against 12-18 µs on a quiet host. The service's ratios fall further than the ceilings on such a host (docs/performance.md "Seventh pass"): compare CPU per request with a quiet-host run, not ratios with the targets.`;
}
