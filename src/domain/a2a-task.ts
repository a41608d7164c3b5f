// The A2A task model the observatory keeps (docs/agents.md "Tasks"), independent of the protocol
// version a client speaks: task states, which of them are final, the page token of ListTasks and
// the output modes a client accepts. Pure.

/** Task states, as stored (A2A 0.3 spelling; src/agents/a2a-v1.ts maps them to TASK_STATE_*). */
export const TASK_STATES = ['submitted', 'working', 'input-required', 'auth-required', 'completed', 'failed', 'canceled', 'rejected'] as const;
export type TaskState = (typeof TASK_STATES)[number];

/** A task in one of these states never changes again (A2A 1.0 section 3.1.5, 3.1.6). */
export const TERMINAL_STATES: ReadonlySet<string> = new Set(['completed', 'failed', 'canceled', 'rejected']);
/** States a task waits in for the client (interrupted, not terminal). */
export const INTERRUPTED_STATES: ReadonlySet<string> = new Set(['input-required', 'auth-required']);

export const isTerminal = (state: string) => TERMINAL_STATES.has(state);

/** ListTasks page size when the client gives none, and the most one page holds. */
export const LIST_PAGE_SIZE = { default: 50, max: 100 } as const;

/** Where the next ListTasks page starts: after this task in (status time desc, id desc) order. */
export interface PagePosition {
  updatedAt: Date;
  id: string;
}

/**
 * Whether a time is one PostgreSQL's timestamptz and our RFC 3339 strings both hold: UTC years
 * 1 to 9999. JavaScript dates reach years -271821 to 275760 (and year 0), which the database
 * refuses as out of range: a page token or a timestamp naming one is the caller's error.
 */
export function storableTime(d: Date): boolean {
  const year = d.getUTCFullYear();
  return !Number.isNaN(d.getTime()) && year >= 1 && year <= 9999;
}

/** The opaque `nextPageToken`: base64url of the last task's status time and id. */
export function encodePageToken(p: PagePosition): string {
  return Buffer.from(JSON.stringify([p.updatedAt.toISOString(), p.id]), 'utf8').toString('base64url');
}

/** Reads a page token back; null when it is not one this service issued (the caller says so). */
export function decodePageToken(token: string): PagePosition | null {
  if (token.length > 600 || !/^[A-Za-z0-9_-]+$/.test(token)) return null;
  try {
    const v = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(v) || v.length !== 2 || typeof v[0] !== 'string' || typeof v[1] !== 'string') return null;
    const at = new Date(v[0]);
    if (!storableTime(at) || at.toISOString() !== v[0] || v[1] === '' || v[1].length > 256) return null;
    return { updatedAt: at, id: v[1] };
  } catch {
    return null;
  }
}

/** Media types of the parts the skills answer with. */
export const OUTPUT_MODES = ['application/json', 'text/plain'] as const;

/**
 * Which of our output modes a client accepts (`acceptedOutputModes`; empty means any). Media
 * ranges are honoured: `*\/*`, `application/*`, and parameters such as `;charset=utf-8` are ignored.
 */
export function acceptedOutputModes(accepted: readonly string[] | undefined): string[] {
  if (!accepted || accepted.length === 0) return [...OUTPUT_MODES];
  const ranges = accepted.map((a) => a.split(';')[0]!.trim().toLowerCase());
  return OUTPUT_MODES.filter((mode) => {
    const [type] = mode.split('/');
    return ranges.some((r) => r === mode || r === '*/*' || r === '*' || r === `${type}/*`);
  });
}

/** The last `n` entries of a history (n undefined: all; 0: none). */
export function lastMessages<T>(history: readonly T[], n: number | undefined): T[] {
  if (n === undefined) return [...history];
  return n === 0 ? [] : history.slice(-n);
}

/** Bytes of `v` as JSON text (UTF-8). */
export const jsonBytes = (v: unknown): number => Buffer.byteLength(JSON.stringify(v) ?? '');

/**
 * The newest messages of a history whose JSON fits in `maxBytes` (the array's brackets and
 * commas counted): the oldest go first, as A2A lets a server return fewer messages than asked.
 */
export function newestWithin<T>(history: readonly T[], maxBytes: number): T[] {
  let bytes = 2;
  let i = history.length;
  while (i > 0) {
    const b = jsonBytes(history[i - 1]) + (i < history.length ? 1 : 0);
    if (bytes + b > maxBytes) break;
    bytes += b;
    i--;
  }
  return history.slice(i);
}

/**
 * A task's answer cut to `maxBytes` of JSON: whole when it fits, else with the oldest messages of
 * its history left out until it does (with none left, as small as it gets). `build` makes the
 * answer from a history, in the caller's wire shape, with no `history` member when it is empty.
 * Messages are measured newest first and only until the bound is reached.
 */
export function answerWithin<T>(history: readonly T[], maxBytes: number | undefined, build: (history: T[]) => Record<string, unknown>): Record<string, unknown> {
  if (maxBytes === undefined || history.length === 0) return build([...history]);
  // `,"history":` joins the member to the rest.
  const kept = newestWithin(history, maxBytes - jsonBytes(build([])) - 11);
  return build(kept);
}
