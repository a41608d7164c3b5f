import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './support/app.js';

// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned devDependency, so
// no download at test time) against /mcp on a started app, once per protocol generation /mcp
// serves: 2025-11-25 (initialize handshake) and 2026-07-28 (stateless). Every check must pass
// except those listed, with a reason, in mcp-conformance.expected-failures.json (per scenario or
// per scenario#check); a listed one that starts to pass fails too, so the list never goes stale.
// The 0.2.x suite imports fs.globSync (Node 22) at load; support/conformance-node20.mjs supplies
// it on Node 20 (only commands we do not run call it).

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cli = path.join(root, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const node20 = path.join(root, 'test', 'support', 'conformance-node20.mjs');
const SUITE_VERSION = '0.2.0-alpha.12';

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

/** Scenarios (and their checks) that apply to a tools-only server: they must run and pass. */
const MUST_PASS: Record<string, string[]> = {
  '2025-11-25': ['server-initialize', 'ping', 'tools-list', 'dns-rebinding-protection'],
  '2026-07-28': ['server-stateless', 'tools-list', 'caching', 'http-header-validation', 'dns-rebinding-protection', 'input-required-result-unsupported-methods', 'input-required-result-validate-input'],
};

describe(`MCP conformance suite ${SUITE_VERSION}`, () => {
  it('the installed suite is the pinned one', async () => {
    const pkg = JSON.parse(await readFile(path.join(root, 'node_modules', '@modelcontextprotocol', 'conformance', 'package.json'), 'utf8')) as { version: string };
    expect(pkg.version).toBe(SUITE_VERSION);
  });

  for (const revision of ['2025-11-25', '2026-07-28'] as const) {
    it(`passes every check that applies to this server at ${revision}`, async () => {
      const out = path.join(outDir, revision);
      // Async spawn: the app answers from this same process while the suite runs.
      const run = await new Promise<{ code: number; out: string }>((resolve) => {
        execFile(
          process.execPath,
          ['--import', node20, cli, 'server', '--url', `${app.base}/mcp`, '--suite', 'all', '--spec-version', revision, '-o', out],
          { timeout: 240_000, maxBuffer: 16 << 20 },
          (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}\n${stderr}` }),
        );
      });
      const dirs = await readdir(out).catch(() => [] as string[]);
      expect(dirs.length, `the suite produced no results:\n${run.out}`).toBeGreaterThan(20);

      const failed = new Map<string, string>(); // "scenario#check" -> message
      const ran = new Set<string>();
      for (const d of dirs) {
        const scenario = d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, '');
        const checks = JSON.parse(await readFile(path.join(out, d, 'checks.json'), 'utf8')) as Check[];
        for (const c of checks) {
          ran.add(scenario);
          ran.add(`${scenario}#${c.id}`);
          if (c.status === 'FAILURE') failed.set(`${scenario}#${c.id}`, c.errorMessage ?? '');
        }
      }
      const all = JSON.parse(await readFile(path.join(root, 'test', 'mcp-conformance.expected-failures.json'), 'utf8')) as Record<string, Record<string, string>>;
      const expected = all[revision]!;
      const keys = Object.keys(expected);
      for (const k of keys) expect(expected[k]!.length, `reason for ${k}`).toBeGreaterThan(10);
      const isExpected = (key: string) => keys.includes(key) || keys.includes(key.slice(0, key.indexOf('#')));

      const unexpectedFailures = [...failed].filter(([k]) => !isExpected(k)).map(([k, why]) => `${k}: ${why}`);
      const unexpectedPasses = keys.filter((k) => ran.has(k) && ![...failed.keys()].some((f) => f === k || f.startsWith(`${k}#`)));
      const neverRan = keys.filter((k) => !ran.has(k));
      expect(unexpectedFailures, 'checks that failed but are not expected to').toEqual([]);
      expect(unexpectedPasses, 'expected failures that now pass: remove them from the file').toEqual([]);
      expect(neverRan, 'expected failures the suite no longer has').toEqual([]);
      // The scenarios that apply to a tools-only server ran, and failed nowhere but in listed checks.
      for (const s of MUST_PASS[revision]!) {
        expect(ran.has(s), `${s} ran`).toBe(true);
        expect([...failed.keys()].filter((f) => f.startsWith(`${s}#`) && !keys.includes(f)), `${s} passes`).toEqual([]);
      }
    }, 300_000);
  }
});
