import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { clipForDisplay, DIFF_DISPLAY_LIMITS, diffLines, MAX_DIFF_LINES, newDisplayBudget, readablePart, splitLines, withContext, type DiffLine } from '../src/domain/text-diff.js';
import { hashManifest, jcs } from '../src/domain/drift.js';

const ops = (d: DiffLine[]) => d.map((l) => `${l.op}${l.text}`);

describe('line diff', () => {
  it('marks removed and added lines between unchanged ones, removals first', () => {
    expect(ops(diffLines(['a', 'b', 'c', 'd'], ['a', 'x', 'c', 'd', 'e']))).toEqual([' a', '-b', '+x', ' c', ' d', '+e']);
    expect(ops(diffLines([], ['n']))).toEqual(['+n']);
    expect(ops(diffLines(['o'], []))).toEqual(['-o']);
    expect(diffLines(['same'], ['same'])).toEqual([{ op: ' ', text: 'same' }]);
  });

  it('always rebuilds both sides and keeps every common line it can (property)', () => {
    const lines = fc.array(fc.constantFrom('a', 'b', 'c', 'd', ''), { maxLength: 30 });
    fc.assert(
      fc.property(lines, lines, (before, after) => {
        const d = diffLines(before, after);
        expect(d.filter((l) => l.op !== '+').map((l) => l.text)).toEqual(before);
        expect(d.filter((l) => l.op !== '-').map((l) => l.text)).toEqual(after);
        if (JSON.stringify(before) === JSON.stringify(after)) expect(d.every((l) => l.op === ' ')).toBe(true);
      }),
    );
  });

  it('falls back to whole-for-whole beyond the size bound, after peeling common ends', () => {
    const big = Array.from({ length: MAX_DIFF_LINES + 1 }, (_, i) => `l${i}`);
    const d = diffLines(['head', ...big, 'tail'], ['head', ...big.map((l) => `${l}!`), 'tail']);
    expect(d[0]).toEqual({ op: ' ', text: 'head' });
    expect(d.at(-1)).toEqual({ op: ' ', text: 'tail' });
    expect(d.filter((l) => l.op === '-')).toHaveLength(big.length);
    expect(d.filter((l) => l.op === '+')).toHaveLength(big.length);
  });

  it('compares line by line only within the budget it is given, and spends it', () => {
    const before = Array.from({ length: 100 }, (_, i) => `b${i}`);
    const after = Array.from({ length: 50 }, (_, i) => (i % 2 ? `b${i}` : `a${i}`));
    const budget = { cells: 100 * 50 };
    const d = diffLines(['head', ...before], ['head', ...after], budget);
    expect(budget.cells).toBe(0); // the common head costs nothing
    expect(d.filter((l) => l.op === ' ')).toHaveLength(1 + 25);
    // Over what is left: whole-for-whole, nothing spent.
    const whole = diffLines(before, after, budget);
    expect(whole.filter((l) => l.op === ' ')).toHaveLength(0);
    expect(budget.cells).toBe(0);
    expect(newDisplayBudget()).toEqual({ cells: DIFF_DISPLAY_LIMITS.pageCells, chars: DIFF_DISPLAY_LIMITS.pageChars });
  });

  it('cuts what a page shows: lines per part, characters per line (never inside a surrogate pair), characters per page', () => {
    const many: DiffLine[] = Array.from({ length: DIFF_DISPLAY_LIMITS.partLines + 10 }, (_, i) => ({ op: '+', text: `l${i}` }));
    const budget = { chars: 1_000_000 };
    const shown = clipForDisplay([{ op: '…', count: 5 }, ...many], budget);
    expect(shown.lines).toHaveLength(DIFF_DISPLAY_LIMITS.partLines);
    expect(shown.hidden).toBe(11);
    expect(budget.chars).toBe(1_000_000 - shown.lines.reduce((n, l) => n + (l.op === '…' ? 0 : l.text.length), 0));

    const wide = `${'x'.repeat(DIFF_DISPLAY_LIMITS.lineChars - 1)}😀tail`;
    const cut = clipForDisplay([{ op: '-', text: wide }], { chars: 1_000_000 }).lines[0] as DiffLine;
    expect(cut.text).toBe(`${'x'.repeat(DIFF_DISPLAY_LIMITS.lineChars - 1)}…`);

    const small = { chars: 5 };
    const page = clipForDisplay([{ op: ' ', text: 'abc' }, { op: '+', text: 'defg' }, { op: '+', text: 'h' }, { op: '…', count: 3 }], small);
    expect(page).toEqual({ lines: [{ op: ' ', text: 'abc' }], hidden: 1 + 1 + 3 });
    expect(small.chars).toBe(2);
  });

  it('folds long unchanged runs, keeping context around changes', () => {
    const before = Array.from({ length: 20 }, (_, i) => String(i));
    const after = [...before];
    after[10] = 'ten';
    const c = withContext(diffLines(before, after), 2);
    expect(c).toEqual([
      { op: '…', count: 8 },
      { op: ' ', text: '8' },
      { op: ' ', text: '9' },
      { op: '-', text: '10' },
      { op: '+', text: 'ten' },
      { op: ' ', text: '11' },
      { op: ' ', text: '12' },
      { op: '…', count: 7 },
    ]);
  });

  it('splits lines of any ending without a phantom last line', () => {
    expect(splitLines('')).toEqual([]);
    expect(splitLines('a\r\nb\rc\n')).toEqual(['a', 'b', 'c']);
  });
});

describe('readable tool parts', () => {
  it('shows a description as text and a schema as sorted, indented JSON', () => {
    expect(readablePart(jcs('Line one\nline two'))).toBe('Line one\nline two');
    expect(readablePart(jcs({ type: 'object', properties: { b: { type: 'string' }, a: { type: 'number' } } }))).toBe(
      '{\n  "properties": {\n    "a": {\n      "type": "number"\n    },\n    "b": {\n      "type": "string"\n    }\n  },\n  "type": "object"\n}',
    );
    expect(readablePart(jcs(undefined))).toBe('');
  });

  it('keeps the canonical text of each part under the hash the baseline stores', () => {
    const m = hashManifest([{ name: 't', description: 'd', inputSchema: { b: 1, a: 2 } }]);
    const t = m.tools[0]!;
    expect(m.texts.get(t.description)).toBe('"d"');
    expect(m.texts.get(t.input_schema)).toBe('{"a":2,"b":1}');
    expect(m.texts.get(t.output_schema)).toBe('null');
  });
});
