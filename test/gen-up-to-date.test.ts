import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe('the contract', () => {
  it('passes buf lint', () => {
    execFileSync('npx', ['buf', 'lint'], { stdio: 'pipe' });
  });

  it('gen/ is exactly what buf generate makes from proto/', () => {
    const out = mkdtempSync(join(tmpdir(), 'gen-check-'));
    try {
      execFileSync('npx', ['buf', 'generate', '-o', out], { stdio: 'pipe' });
      const fresh = files(join(out, 'gen')).map((f) => relative(join(out, 'gen'), f)).sort();
      const committed = files('gen').map((f) => relative('gen', f)).sort();
      expect(committed, 'run `npm run gen` and commit gen/').toEqual(fresh);
      for (const f of fresh) {
        expect(readFileSync(join('gen', f), 'utf8'), `gen/${f} is stale: run \`npm run gen\``).toBe(readFileSync(join(out, 'gen', f), 'utf8'));
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
