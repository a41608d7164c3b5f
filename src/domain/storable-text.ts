// Text the database cannot store as given. PostgreSQL refuses NUL in `text` (SQLSTATE 22021) and
// its escape in `jsonb` (22P05); a lone UTF-16 surrogate has no UTF-8 form at all (drivers store
// U+FFFD instead of what was sent, and PostgreSQL refuses its JSON escape, `\ud800`, in `jsonb`).
// Binary protobuf and Connect's JSON decoding cannot carry a lone surrogate; every door that reads
// JSON itself (REST bodies, MCP arguments, A2A messages) and every hostile peer we read from
// (an MCP server's manifest or Server Card) can. Refused or cleaned at the edge, never a database
// error after the work (docs/reliability.md "Values the database refuses").

// A high surrogate not followed by a low one, or a low one not preceded by a high one (no `u`
// flag: the pattern sees UTF-16 code units). String.prototype.isWellFormed is ES2024.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** NUL or any surrogate: a string without one is storable as given (the common case, one scan). */
const SUSPECT = /[\u0000\uD800-\uDFFF]/;

/** Why a text value cannot be stored as given, or null. */
export function unstorableText(s: string): string | null {
  if (!SUSPECT.test(s)) return null;
  if (s.includes('\u0000')) return 'must not contain NUL characters';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (no lone surrogates)';
  return null;
}

/**
 * The first string or member name anywhere in a parsed JSON value that cannot be stored as given,
 * with its path (`message.parts[0].text`), or null. Iterative, so no nesting depth can exhaust
 * the stack; a value read from a body is bounded by the body limit.
 */
export function unstorableJson(value: unknown, root = ''): { path: string; why: string } | null {
  const stack: [unknown, string][] = [[value, root]];
  while (stack.length > 0) {
    const [v, path] = stack.pop()!;
    if (typeof v === 'string') {
      const why = unstorableText(v);
      if (why !== null) return { path: path || '(value)', why };
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push([v[i], `${path}[${i}]`]);
    } else if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [k, e] = entries[i]!;
        const at = path ? `${path}.${k}` : k;
        const why = unstorableText(k);
        if (why !== null) return { path: at, why: `(member name) ${why}` };
        stack.push([e, at]);
      }
    }
  }
  return null;
}

// In JSON text as JSON.stringify writes it (well-formed: a lone surrogate as its `\udXXX` escape,
// NUL as `\u0000`, a valid pair as itself), an escape of NUL or of a surrogate that an even run of
// backslashes precedes (an odd run would make the `\` itself escaped text).
const UNSTORABLE_ESCAPE = /(?<!\\)((?:\\\\)*)\\u(?:0000|[dD][89abcdefABCDEF][0-9a-fA-F]{2})/g;

/**
 * A value read from a peer (an MCP server's manifest or self-description, a Server Card) with
 * every NUL and lone surrogate, in strings and member names, replaced by U+FFFD: what a reader of
 * well-formed UTF-8 would see, and what the database can store. The same value when there is none
 * (the common case: one scan, no copy).
 */
export function storableCopy<T>(value: T): T {
  if (unstorableJson(value) === null) return value;
  return JSON.parse(JSON.stringify(value).replace(UNSTORABLE_ESCAPE, '$1\\ufffd')) as T;
}
