import { storableCopy } from './storable-text.js';

// How deep a parsed JSON value nests. JSON.parse takes any depth; much of what reads the result
// afterwards (JSON.stringify, RFC 8785 canonicalisation, schema validators) recurses and throws
// RangeError a few thousand levels down. Values from outside are held to a depth far beyond any
// real message and far below that, checked without recursion.

/** Deepest nesting a message from outside may have (an MCP message, a tool of a manifest). */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests objects/arrays deeper than `max` (iterative: hostile input cannot blow the stack here). */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth >= max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
  }
  return false;
}

/** A peer's document nested deeper than MAX_JSON_DEPTH: refused as invalid JSON is (a SyntaxError). */
export class JsonTooDeep extends SyntaxError {
  constructor() {
    super(`the document nests deeper than ${MAX_JSON_DEPTH} levels`);
  }
}

/**
 * JSON from a peer (a server's documents, its Server Card): parsed, held to MAX_JSON_DEPTH (a
 * deeper document is refused as a SyntaxError, as invalid JSON is), its NUL and lone surrogates
 * as U+FFFD (storableCopy).
 */
export function parsePeerJson(text: string): unknown {
  const value = JSON.parse(text) as unknown;
  if (nestedDeeperThan(value, MAX_JSON_DEPTH)) throw new JsonTooDeep();
  return storableCopy(value);
}
