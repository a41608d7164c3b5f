// Line diffs for people (the /drift page): what a tool's description or schema said before and
// after a manifest change. Pure: no I/O.

export type DiffOp = ' ' | '-' | '+';
export interface DiffLine {
  op: DiffOp;
  text: string;
}
/** A run of unchanged lines left out of a diff shown with context. */
export interface DiffGap {
  op: '…';
  count: number;
}

/** Beyond this many lines on a side the LCS table would be too big: the diff is whole-for-whole. */
export const MAX_DIFF_LINES = 2000;

/**
 * What one page of diffs may spend (the /drift page; its texts come from the servers it shows, so
 * from anyone who runs one): LCS table cells over every diff (a 2,000 x 2,000-line comparison is
 * 4 M), lines one part shows, characters one line shows, characters the whole page shows.
 */
export const DIFF_DISPLAY_LIMITS = { pageCells: 8_000_000, partLines: 400, lineChars: 1_000, pageChars: 1_000_000 } as const;

/** What is left of a page's allowance (DIFF_DISPLAY_LIMITS), spent by diffLines and clipForDisplay. */
export interface DisplayBudget {
  cells: number;
  chars: number;
}

export function newDisplayBudget(): DisplayBudget {
  return { cells: DIFF_DISPLAY_LIMITS.pageCells, chars: DIFF_DISPLAY_LIMITS.pageChars };
}

/** A diff (or a whole text as added or removed lines) cut to what a page shows; `hidden` lines were left out. */
export interface ShownLines {
  lines: (DiffLine | DiffGap)[];
  hidden: number;
}

/** Splits into lines; a trailing newline does not make an extra empty line. */
export function splitLines(s: string): string[] {
  if (s === '') return [];
  const lines = s.split(/\r\n|\r|\n/);
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/**
 * Line diff of `before` and `after` by longest common subsequence: unchanged lines (' '),
 * removed ('-') and added ('+'), removals before additions within a change. Common prefix and
 * suffix are peeled off first, so a small edit in a long text costs little.
 */
export function diffLines(before: string[], after: string[], budget?: Pick<DisplayBudget, 'cells'>): DiffLine[] {
  let start = 0;
  while (start < before.length && start < after.length && before[start] === after[start]) start++;
  let endB = before.length;
  let endA = after.length;
  while (endB > start && endA > start && before[endB - 1] === after[endA - 1]) {
    endB--;
    endA--;
  }
  const head: DiffLine[] = before.slice(0, start).map((text) => ({ op: ' ', text }));
  const tail: DiffLine[] = before.slice(endB).map((text) => ({ op: ' ', text }));
  const b = before.slice(start, endB);
  const a = after.slice(start, endA);
  let middle: DiffLine[];
  const cells = b.length * a.length;
  if (b.length > MAX_DIFF_LINES || a.length > MAX_DIFF_LINES || (budget !== undefined && cells > budget.cells)) {
    middle = [...b.map((text): DiffLine => ({ op: '-', text })), ...a.map((text): DiffLine => ({ op: '+', text }))];
  } else {
    if (budget !== undefined) budget.cells -= cells;
    middle = lcsDiff(b, a);
  }
  return [...head, ...middle, ...tail];
}

function lcsDiff(b: string[], a: string[]): DiffLine[] {
  const n = b.length;
  const m = a.length;
  // len[i][j]: LCS length of b[i..] and a[j..], flattened.
  const w = m + 1;
  const len = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      len[i * w + j] = b[i] === a[j] ? len[(i + 1) * w + j + 1]! + 1 : Math.max(len[(i + 1) * w + j]!, len[i * w + j + 1]!);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  let removed: DiffLine[] = [];
  let added: DiffLine[] = [];
  const flush = () => {
    out.push(...removed, ...added);
    removed = [];
    added = [];
  };
  while (i < n || j < m) {
    if (i < n && j < m && b[i] === a[j]) {
      flush();
      out.push({ op: ' ', text: b[i]! });
      i++;
      j++;
    } else if (j >= m || (i < n && len[(i + 1) * w + j]! >= len[i * w + j + 1]!)) {
      removed.push({ op: '-', text: b[i]! });
      i++;
    } else {
      added.push({ op: '+', text: a[j]! });
      j++;
    }
  }
  flush();
  return out;
}

/** Keeps `context` unchanged lines around each change; longer unchanged runs become a gap. */
export function withContext(lines: DiffLine[], context = 3): (DiffLine | DiffGap)[] {
  const keep = new Array<boolean>(lines.length).fill(false);
  lines.forEach((l, k) => {
    if (l.op === ' ') return;
    for (let x = Math.max(0, k - context); x <= Math.min(lines.length - 1, k + context); x++) keep[x] = true;
  });
  const out: (DiffLine | DiffGap)[] = [];
  let gap = 0;
  lines.forEach((l, k) => {
    if (keep[k]) {
      if (gap > 0) out.push({ op: '…', count: gap });
      gap = 0;
      out.push(l);
    } else gap++;
  });
  if (gap > 0) out.push({ op: '…', count: gap });
  return out;
}

/**
 * Cuts a diff to what a page shows: at most DIFF_DISPLAY_LIMITS.partLines lines, each at most
 * lineChars characters (cut with "…"), and no more characters than the page has left (`budget`,
 * spent here). Unchanged runs already folded into gaps cost nothing.
 */
export function clipForDisplay(lines: readonly (DiffLine | DiffGap)[], budget: Pick<DisplayBudget, 'chars'>): ShownLines {
  const out: (DiffLine | DiffGap)[] = [];
  let hidden = 0;
  for (const l of lines) {
    if (hidden > 0 || out.length >= DIFF_DISPLAY_LIMITS.partLines) {
      hidden += l.op === '…' ? l.count : 1;
      continue;
    }
    if (l.op === '…') {
      out.push(l);
      continue;
    }
    const text = l.text.length > DIFF_DISPLAY_LIMITS.lineChars ? `${cutAt(l.text, DIFF_DISPLAY_LIMITS.lineChars)}…` : l.text;
    if (text.length > budget.chars) {
      hidden++;
      continue;
    }
    budget.chars -= text.length;
    out.push(text === l.text ? l : { op: l.op, text });
  }
  return { lines: out, hidden };
}

/** The first `n` UTF-16 units of `s`, one fewer when the cut would split a surrogate pair. */
export function cutAt(s: string, n: number): string {
  if (s.length <= n) return s;
  const c = s.charCodeAt(n - 1);
  return s.slice(0, c >= 0xd800 && c <= 0xdbff ? n - 1 : n);
}

/**
 * A tool part's canonical JSON (RFC 8785, as hashed) as text people read: a string description
 * as itself, anything else pretty-printed with two-space indentation (keys stay in canonical,
 * sorted order, so the same value always prints the same lines). Absent parts print as "".
 */
export function readablePart(canonical: string): string {
  let v: unknown;
  try {
    v = JSON.parse(canonical);
  } catch {
    return canonical;
  }
  if (v === null) return '';
  if (typeof v === 'string') return v;
  return JSON.stringify(v, null, 2);
}
