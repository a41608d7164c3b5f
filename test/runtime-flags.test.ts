import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SERVICE_V8_FLAGS } from '../src/runtime-flags.js';

// The serving process's V8 settings (src/runtime-flags.ts). V8 ignores a flag it does not know
// without a word, so a Node.js upgrade that renamed one would silently undo the setting: this
// checks each against the running Node's own list, and that the service sets them before any
// other module of it runs.
describe('V8 settings of the serving process', () => {
  it('every flag set is one this Node.js knows', () => {
    const known = execFileSync(process.execPath, ['--v8-options'], { encoding: 'utf8', maxBuffer: 16 << 20 });
    expect(SERVICE_V8_FLAGS.length).toBeGreaterThan(0);
    for (const flag of SERVICE_V8_FLAGS) {
      const name = flag.replace(/^--(no-)?/, '');
      expect(known, `${flag} is not a V8 flag of Node.js ${process.version}`).toMatch(new RegExp(`^\\s*--${name}\\b`, 'm'));
    }
  });

  it('are applied by the first import of the service entry point', () => {
    const main = readFileSync(new URL('../src/main.ts', import.meta.url), 'utf8');
    const firstImport = /^import\s[^;]*;/m.exec(main)?.[0];
    expect(firstImport).toBe("import './runtime-flags.js';");
  });
});
