// Keyset paging of ranked server lists (leaderboard, /monitor, /atlas/report; issue 23). Pure.
//
// A list is ordered by trust score (highest first, servers without a score last), then report
// count (most first), then canonical URL (code-unit order, the order of PostgreSQL's "C"
// collation the ranked query sorts with). A cursor is the key of the last row a page showed plus
// the filter it was made for, as opaque base64url JSON: the next page starts after that key, so
// a page never repeats or skips a server because others moved in between (a server whose score
// changed moves to its new place). A cursor is bound to its filter; another filter refuses it.

import { GetLeaderboardRequestSchema } from '../../gen/observatory/v1/trust_pb.js';
import { contractField, maxLength } from './contract-rules.js';

export const MAX_CURSOR_CHARS = 512;
export const LIST_VERDICTS = ['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'] as const;
export type ListVerdict = (typeof LIST_VERDICTS)[number];
/** Longest search text: the max_len rule of GetLeaderboardRequest.q in proto/. */
export const MAX_SEARCH_CHARS = maxLength(contractField(GetLeaderboardRequestSchema, 'q'))!;

export class InvalidCursor extends Error {}

export interface RankKey {
  /** Trust score; null for servers without a computed score. */
  s: number | null;
  n: number;
  u: string;
}

/** The order of ranked lists: score descending (null last), report count descending, URL ascending. */
export function compareRankKeys(a: RankKey, b: RankKey): number {
  if (a.s !== b.s) {
    if (a.s === null) return 1;
    if (b.s === null) return -1;
    return b.s - a.s;
  }
  if (a.n !== b.n) return b.n - a.n;
  return a.u < b.u ? -1 : a.u > b.u ? 1 : 0;
}

/** What a cursor is bound to: the list's filter, as one string. */
export function filterSignature(f: { category: string | null; q: string | null; verdict: string | null }): string {
  return JSON.stringify([f.category ?? '', f.q ?? '', f.verdict ?? '']);
}

export function encodeCursor(key: RankKey, signature: string): string {
  return Buffer.from(JSON.stringify({ v: 1, s: key.s, n: key.n, u: key.u, f: signature }), 'utf8').toString('base64url');
}

/** The key a cursor names; InvalidCursor when it is not one of ours or was made for another filter. */
export function decodeCursor(raw: string, signature: string): RankKey {
  if (raw.length === 0 || raw.length > MAX_CURSOR_CHARS || !/^[A-Za-z0-9_-]+$/.test(raw)) throw new InvalidCursor('cursor is not a cursor this service issued');
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw new InvalidCursor('cursor is not a cursor this service issued');
  }
  const d = doc as Record<string, unknown>;
  if (
    typeof d !== 'object' ||
    d === null ||
    d.v !== 1 ||
    !(d.s === null || (typeof d.s === 'number' && Number.isFinite(d.s))) ||
    typeof d.n !== 'number' ||
    !Number.isFinite(d.n) ||
    typeof d.u !== 'string' ||
    typeof d.f !== 'string'
  ) {
    throw new InvalidCursor('cursor is not a cursor this service issued');
  }
  if (d.f !== signature) throw new InvalidCursor('cursor belongs to another filter (category, q or verdict); start again without it');
  return { s: d.s as number | null, n: d.n, u: d.u };
}

/** Index of the first element of `sorted` (ordered by compareRankKeys) that comes after `key`. */
export function indexAfter<T>(sorted: readonly T[], keyOf: (x: T) => RankKey, key: RankKey): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareRankKeys(keyOf(sorted[mid]!), key) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Search text normalised for matching (trimmed, lower case); null when empty. */
export function normaliseSearch(q: string | undefined | null): string | null {
  const t = (q ?? '').trim().toLowerCase();
  return t === '' ? null : t;
}

/**
 * Cursors of the other paged lists (the trust delta's groups, demand targets): the sort key of
 * the last row a page showed (a short tuple of numbers and strings) and the filter it was made
 * for, as opaque base64url JSON, bound to that filter like the ranked lists' cursors.
 */
export type ListKey = readonly (number | string)[];

export function encodeListCursor(key: ListKey, signature: string): string {
  return Buffer.from(JSON.stringify({ v: 2, k: key, f: signature }), 'utf8').toString('base64url');
}

/** The key a list cursor names (`shape`: the type of each element); InvalidCursor otherwise. */
export function decodeListCursor(raw: string, signature: string, shape: readonly ('number' | 'string')[]): (number | string)[] {
  const bad = () => new InvalidCursor('cursor is not a cursor this service issued');
  if (raw.length === 0 || raw.length > MAX_CURSOR_CHARS || !/^[A-Za-z0-9_-]+$/.test(raw)) throw bad();
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw bad();
  }
  const d = doc as Record<string, unknown> | null;
  if (typeof d !== 'object' || d === null || d.v !== 2 || !Array.isArray(d.k) || typeof d.f !== 'string' || d.k.length !== shape.length) throw bad();
  const k = d.k as unknown[];
  for (let i = 0; i < shape.length; i++) {
    const x = k[i];
    if (shape[i] === 'number' ? typeof x !== 'number' || !Number.isFinite(x) : typeof x !== 'string') throw bad();
  }
  if (d.f !== signature) throw new InvalidCursor('cursor belongs to another list or window; start again without it');
  return k as (number | string)[];
}
