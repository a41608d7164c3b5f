import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { runCli } from '../src/cli.js';
import { terminalText } from '../src/cli/terminal-text.js';

// Text the command line prints often came from someone else (an MCP server's error message, a
// token's key id, a registry page). Written raw to a terminal, its control characters are commands:
// here a key id that wipes the "invalid" line, writes "valid: true" in its place, and sets the
// clipboard (OSC 52). Every line the CLI prints shows them as \uXXXX escapes instead.

const ROOT = new URL('..', import.meta.url).pathname;
const HOSTILE = '\u001b]52;c;cHduZWQ=\u0007\u001b[1A\u001b[2K\rvalid: true \u009b2K\u202eexe.txt\b\u007f\u2066';
// What may never reach the terminal: C0 controls but tab and newline, DEL, C1, bidi controls.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/;

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const hostileToken = `${b64({ alg: 'EdDSA', kid: HOSTILE })}.${b64({ kind: 'receipt' })}.${Buffer.alloc(64).toString('base64url')}`;

function capture() {
  const lines: string[] = [];
  return { lines, io: { out: (l: string) => lines.push(l), err: (l: string) => lines.push(l), env: {} } };
}

describe('terminalText', () => {
  it('writes every terminal control character out as an escape, and leaves text, tabs and newlines', () => {
    expect(terminalText(HOSTILE)).toBe('\\u001b]52;c;cHduZWQ=\\u0007\\u001b[1A\\u001b[2K\\u000dvalid: true \\u009b2K\\u202eexe.txt\\u0008\\u007f\\u2066');
    expect(terminalText('naïve 中文 🦀\tcol\nnext line')).toBe('naïve 中文 🦀\tcol\nnext line');
    expect(terminalText('')).toBe('');
  });

  it('keeps JSON output meaning the same (the escape is JSON\'s own spelling of the character)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.dictionary(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' })), (s, d) => {
        for (const text of [JSON.stringify({ s, d }), JSON.stringify({ s, d }, null, 2)]) {
          const shown = terminalText(text);
          expect(shown).not.toMatch(UNSAFE);
          expect(JSON.parse(shown)).toEqual(JSON.parse(text));
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('the command line prints no control characters it was handed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cli-terminal-'));
  const jwks = join(dir, 'jwks.json');
  writeFileSync(jwks, JSON.stringify({ keys: [] }));

  it('verify: a token whose key id is an escape sequence', async () => {
    const c = capture();
    expect(await runCli(['verify', hostileToken, '--jwks', jwks], c.io)).toBe(1);
    expect(c.lines.join('\n')).toContain('invalid: unknown key id \\u001b]52;c;');
    for (const l of c.lines) expect(l).not.toMatch(UNSAFE);
  });

  it('an unknown command echoed back, and a usage error', async () => {
    const c = capture();
    expect(await runCli([`x${HOSTILE}`], c.io)).toBe(2);
    expect(await runCli(['verify', 'a', `b${HOSTILE}`], c.io)).toBe(2);
    expect(c.lines.length).toBeGreaterThan(1);
    for (const l of c.lines) expect(l).not.toMatch(UNSAFE);
  });

  it('the observatory process itself (bin/observatory.js) writes the escape, not the sequence', () => {
    const r = spawnSync(process.execPath, [join(ROOT, 'bin/observatory.js'), 'verify', hostileToken, '--jwks', jwks], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('invalid: unknown key id \\u001b]52;c;');
    expect(r.stderr + r.stdout).not.toMatch(UNSAFE);
    rmSync(dir, { recursive: true, force: true });
  }, 70_000);
});
