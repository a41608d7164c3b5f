import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createScratchDatabase, type ScratchDatabase } from '../src/db/scratch.js';

// The service runs through tsx, whose esbuild transform keeps function names: every arrow
// function assigned to a name (`const f = () => ...`, `{ key: () => ... }`) is named with
// Object.defineProperty each time it is created, about 0.6-1 us on Node 20. A hot path that makes
// such a closure per request pays that per request (issue 22 found one per report). This test
// runs the real process as `npm start` does (tsx), counts the names defined while it answers
// 200 each of the hot requests (REST and Connect), and fails for any name defined once per request or more. Per
// connection or per background pass is fine: those stay far below the request count.
const N = 200;

describe('hot paths make no named closure per request (tsx keepNames)', () => {
  it('report, trust, pre-flight, gate and Connect Report', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'obs-names-'));
    const env: Record<string, string> = {
      PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, LOG_LEVEL: 'info', NODE_ENV: 'production',
      KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString('base64'), OBSERVE_ENABLED: '0',
      RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0', RATE_LIMIT_GATE_PER_MINUTE: '0',
    };
    let scratch: ScratchDatabase | null = null;
    if (process.env.DATABASE_URL) {
      scratch = await createScratchDatabase(process.env.DATABASE_URL, 'obs_test');
      env.DATABASE_URL = scratch.url;
    }
    const child = spawn(process.execPath, ['--import', './test/support/count-function-names.mjs', '--import', 'tsx', 'src/main.ts'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const until = async (what: () => boolean, ms: number) => {
      const deadline = Date.now() + ms;
      while (!what() && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
      return what();
    };
    try {
      expect(await until(() => /"address":"http:\/\/127\.0\.0\.1:\d+"/.test(out), 240_000), err).toBe(true);
      const base = /"address":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(out)![1]!;
      const server = 'https://names.example.com/mcp';
      const requests: [string, RequestInit?][] = [
        ['/api/report', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ server_url: server, success: true, latency_ms: 40, tool_name: 'search' }) }],
        [`/api/trust?url=${encodeURIComponent(server)}`],
        [`/v1/preflight?target=${encodeURIComponent(server)}`],
        ['/v1/gate', { headers: { 'x-mcp-server': server } }],
        // Connect unary (JSON), through our adapter over connect-node.
        ['/observatory.v1.TelemetryService/Report', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ serverUrl: server, success: true, latencyMs: 40, toolName: 'search' }) }],
      ];
      const round = async () => {
        for (const [path, init] of requests) {
          const res = await fetch(`${base}${path}`, init);
          expect(res.status, path).toBe(200);
          await res.arrayBuffer();
        }
      };
      // Warm: first-time work (modules, caches, prepared statements) is not per request.
      for (let i = 0; i < 20; i++) await round();
      child.kill('SIGUSR2');
      expect(await until(() => err.includes('FUNCTION-NAMES-ON'), 10_000)).toBe(true);
      for (let i = 0; i < N; i++) await round();
      child.kill('SIGUSR2');
      expect(await until(() => /FUNCTION-NAMES \{/.test(err), 10_000)).toBe(true);
      const counts = JSON.parse(/FUNCTION-NAMES (\{.*\})/.exec(err)![1]!) as Record<string, number>;
      const perRequest = Object.entries(counts).filter(([, n]) => n >= N / 2);
      expect(perRequest, JSON.stringify(counts)).toEqual([]);
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
      await scratch?.drop();
    }
  }, 300_000);
});
