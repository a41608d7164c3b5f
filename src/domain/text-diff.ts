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
export function diffLines(before: string[], after: string[]): DiffLine[] {
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
  if (b.length > MAX_DIFF_LINES || a.length > MAX_DIFF_LINES) {
    middle = [...b.map((text): DiffLine => ({ op: '-', text })), ...a.map((text): DiffLine => ({ op: '+', text }))];
  } else {
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
