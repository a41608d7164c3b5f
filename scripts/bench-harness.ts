// Shared by the bench scripts: child processes (service, ceiling) and autocannon runs.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
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

export async function measure(opts: autocannon.Options, warmup = WARMUP): Promise<autocannon.Result & { load: number }> {
  if (warmup > 0) await autocannon({ connections: CONNECTIONS, ...opts, duration: warmup });
  const load = load1();
  const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
  return Object.assign(r, { load });
}

