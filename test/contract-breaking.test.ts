import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

// `npm run lint` runs `buf breaking --against contract/released.binpb`: the current proto/ must
// pass, and a breaking edit of it must fail (so that CI stops a contract break).

const run = promisify(execFile);
const BUF = path.resolve('node_modules/.bin/buf');
const SNAPSHOT = path.resolve('contract/released.binpb');

async function breaking(cwd: string): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run(BUF, ['breaking', '--against', SNAPSHOT], { cwd, timeout: 120_000 });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe('the released contract', () => {
  it('proto/ as it is passes buf breaking against contract/released.binpb', async () => {
    const r = await breaking(process.cwd());
    expect(r.out).toBe('');
    expect(r.code).toBe(0);
  }, 180_000);

  it('a removed field, a renumbered field and a changed go_package each fail it', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'obs-contract-'));
    try {
      await cp(path.resolve('proto'), path.join(dir, 'proto'), { recursive: true });
      await cp(path.resolve('buf.yaml'), path.join(dir, 'buf.yaml'));
      const file = path.join(dir, 'proto/observatory/v1/telemetry.proto');
      const original = await readFile(file, 'utf8');
      const edits: [string, (s: string) => string, RegExp][] = [
        // Field declarations may carry options over several lines (buf.validate rules).
        ['removed field', (s) => s.replace(/^\s*optional string tool_name = \d+(\s*\[[\s\S]*?\])?;.*$/m, ''), /tool_name/],
        ['renumbered field', (s) => s.replace(/optional double latency_ms = (\d+)/, 'optional double latency_ms = 99'), /latency_ms|99/],
        ['changed go_package', (s) => s.replace(/option go_package = "[^"]+";/, 'option go_package = "example.com/other;other";'), /go_package/],
      ];
      for (const [name, edit, mentions] of edits) {
        const changed = edit(original);
        expect(changed, name).not.toBe(original);
        await writeFile(file, changed);
        const r = await breaking(dir);
        expect(r.code, `${name}: ${r.out}`).not.toBe(0);
        expect(r.out, name).toMatch(mentions);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
