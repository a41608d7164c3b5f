import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stackShares, summarize } from '../scripts/cpuprofile-top.js';

// scripts/cpuprofile-top.ts reads the profiles behind docs/performance.md's figures: a synthetic
// profile with known times checks its self-time and on-stack shares.
describe('cpuprofile-top', () => {
  const frame = (functionName: string, url = '') => ({ functionName, url, lineNumber: 0 });
  // root -> handler (src/) -> parse (node_modules/pkg) ; root -> (idle) ; root -> writev
  const profile = {
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 4, 5] },
      { id: 2, callFrame: frame('handler', `file://${process.cwd()}/src/routes/a.ts`), children: [3] },
      { id: 3, callFrame: frame('parse', 'file:///app/node_modules/pkg/index.js') },
      { id: 4, callFrame: frame('(idle)') },
      { id: 5, callFrame: frame('writev') },
    ],
    // handler self 10, parse 30, idle 40, writev 20 (time deltas in µs)
    samples: [2, 3, 3, 4, 4, 5],
    timeDeltas: [10, 15, 15, 20, 20, 20],
  };

  it('shares of the busy samples with a matching frame anywhere on the stack', () => {
    const dir = mkdtempSync(join(tmpdir(), 'obs-prof-'));
    try {
      const file = join(dir, 'p.cpuprofile');
      writeFileSync(file, JSON.stringify(profile));
      // busy = 60 µs: handler inclusive 40 (67%), parse 30 (50%), writev 20 (33%), nothing 0.
      expect(stackShares(file, ['handler', 'node_modules/pkg/', 'writev', 'absent']).split('\n').map((l) => l.trim())).toEqual([
        '66.7%  handler',
        '50.0%  node_modules/pkg/',
        '33.3%  writev',
        '0.0%  absent',
      ]);
      const text = summarize(file, 3);
      expect(text).toContain('our code on the stack (inclusive of what it calls): 40.0% of samples, 66.7% of the busy ones');
      expect(text).toMatch(/40\.0%\s+\(idle\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
