import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './support/app.js';

// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned devDependency, so
// no download at test time) against /mcp on a started app. Every scenario must pass except those
// listed, with a reason, in mcp-conformance.expected-failures.json; a listed one that starts to
// pass fails too, so the list never goes stale.

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cli = path.join(root, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');

let app: TestApp;
let outDir: string;

beforeAll(async () => {
  app = await startTestApp();
  outDir = await mkdtemp(path.join(tmpdir(), 'mcp-conformance-'));
});
afterAll(async () => {
  await app?.close();
  if (outDir) await rm(outDir, { recursive: true, force: true });
});

interface Check {
  id: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';
  errorMessage?: string;
}

describe('MCP conformance suite 0.1.13', () => {
  it('passes every scenario that applies to this server', async () => {
    // Async spawn: the app answers from this same process while the suite runs.
    const run = await new Promise<{ code: number; out: string }>((resolve) => {
      execFile(process.execPath, [cli, 'server', '--url', `${app.base}/mcp`, '--suite', 'all', '-o', outDir], { timeout: 120_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}\n${stderr}` }),
      );
    });
    const dirs = await readdir(outDir);
    expect(dirs.length, `the suite produced no results:\n${run.out}`).toBeGreaterThan(20);

    const failed = new Map<string, string>();
    const ran = new Set<string>();
    for (const d of dirs) {
      const scenario = d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, '');
      ran.add(scenario);
      const checks = JSON.parse(await readFile(path.join(outDir, d, 'checks.json'), 'utf8')) as Check[];
      const bad = checks.filter((c) => c.status === 'FAILURE');
      if (bad.length > 0) failed.set(scenario, bad.map((c) => `${c.id}: ${c.errorMessage ?? ''}`).join('; '));
    }
    const expected = JSON.parse(await readFile(path.join(root, 'test', 'mcp-conformance.expected-failures.json'), 'utf8')) as Record<string, string>;
    const expectedNames = Object.keys(expected).filter((k) => !k.startsWith('$'));
    for (const name of expectedNames) expect(expected[name]!.length, `reason for ${name}`).toBeGreaterThan(10);

    const unexpectedFailures = [...failed].filter(([s]) => !expectedNames.includes(s)).map(([s, why]) => `${s}: ${why}`);
    const unexpectedPasses = expectedNames.filter((s) => ran.has(s) && !failed.has(s));
    const neverRan = expectedNames.filter((s) => !ran.has(s));
    expect(unexpectedFailures, 'scenarios that failed but are not expected to').toEqual([]);
    expect(unexpectedPasses, 'expected failures that now pass: remove them from the file').toEqual([]);
    expect(neverRan, 'expected failures the suite no longer has').toEqual([]);
    // The scenarios that do apply to a tools-only server must be among those that ran and passed.
    for (const s of ['server-initialize', 'ping', 'tools-list', 'tools-call-error', 'dns-rebinding-protection']) {
      expect(ran.has(s) && !failed.has(s), `${s} passes`).toBe(true);
    }
  }, 150_000);
});
