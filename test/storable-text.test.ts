// src/domain/storable-text.ts: what the database cannot store as given (NUL; a lone UTF-16
// surrogate), found anywhere in a parsed JSON value, and replaced by U+FFFD in values read from
// peers.
import { describe, expect, it } from 'vitest';
import { storableCopy, unstorableJson, unstorableText } from '../src/domain/storable-text.js';

describe('unstorableText', () => {
  it('refuses NUL and lone surrogates of either kind, anywhere; takes valid pairs and everything else', () => {
    for (const s of ['\u0000', 'a\u0000', '\ud800', 'a\ud800b', '\udfff', 'x\udc00', 'end\udbff', '\udc00\ud800']) expect(unstorableText(s), JSON.stringify(s)).not.toBeNull();
    for (const s of ['', 'plain', '😀', 'a😀b', 'é\u00e9', '\ufffd', '\\u0000', '\u0001']) expect(unstorableText(s), JSON.stringify(s)).toBeNull();
  });
});

describe('unstorableJson', () => {
  it('names the path of the first bad string or member name', () => {
    expect(unstorableJson({ message: { parts: [{ text: 'ok' }, { text: 'a\ud800' }] } }, 'params')).toEqual({ path: 'params.message.parts[1].text', why: expect.stringContaining('surrogate') });
    expect(unstorableJson({ meta: { ['k\u0000']: 1 } })).toEqual({ path: 'meta.k\u0000', why: expect.stringContaining('member name') });
    expect(unstorableJson('\u0000')).toEqual({ path: '(value)', why: expect.stringContaining('NUL') });
    expect(unstorableJson({ a: [1, true, null, 'fine', { b: '😀' }] })).toBeNull();
  });

  it('walks any depth without recursion (a body nested 200,000 levels)', () => {
    let v: unknown = 'x\udfff';
    for (let i = 0; i < 200_000; i++) v = i % 2 ? [v] : { a: v };
    expect(unstorableJson(v)?.why).toContain('surrogate');
  });
});

describe('storableCopy', () => {
  it('replaces NUL and lone surrogates in strings and member names with U+FFFD, keeping valid pairs and escaped backslashes', () => {
    const v = { name: 'to\u0000ol', description: 'lone \ud800 and \udfff, pair 😀, literal \\u0000 and \\\ud800', schema: { properties: { ['k\udc00']: { type: 'string' } } }, n: 3, list: ['a\u0000', 'b'] };
    expect(storableCopy(v)).toEqual({
      name: 'to\ufffdol',
      description: 'lone \ufffd and \ufffd, pair 😀, literal \\u0000 and \\\ufffd',
      schema: { properties: { ['k\ufffd']: { type: 'string' } } },
      n: 3,
      list: ['a\ufffd', 'b'],
    });
    expect(unstorableJson(storableCopy(v))).toBeNull();
  });

  it('hands back the same value when nothing needs replacing', () => {
    const v = { name: 'search', description: 'Finds things 😀', inputSchema: { type: 'object' } };
    expect(storableCopy(v)).toBe(v);
  });
});

describe('nestedDeeperThan', () => {
  it('measures any depth without recursion, at the edge exactly', async () => {
    const { nestedDeeperThan } = await import('../src/domain/json-depth.js');
    const nest = (n: number) => {
      let v: unknown = 1;
      for (let i = 0; i < n; i++) v = i % 2 ? [v] : { a: v };
      return v;
    };
    expect(nestedDeeperThan(nest(64), 64)).toBe(false);
    expect(nestedDeeperThan(nest(65), 64)).toBe(true);
    expect(nestedDeeperThan(nest(1_000_000), 64)).toBe(true);
    expect(nestedDeeperThan('text', 0)).toBe(false);
  });
});

describe('parsePeerJson', () => {
  it('refuses a document nested deeper than MAX_JSON_DEPTH as invalid JSON, and keeps NUL and lone surrogates as U+FFFD', async () => {
    const { parsePeerJson, MAX_JSON_DEPTH } = await import('../src/domain/json-depth.js');
    expect(() => parsePeerJson(`${'['.repeat(MAX_JSON_DEPTH + 1)}${']'.repeat(MAX_JSON_DEPTH + 1)}`)).toThrow(SyntaxError);
    expect(() => parsePeerJson('{"a":')).toThrow(SyntaxError);
    expect(parsePeerJson(`${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`)).toBeInstanceOf(Array);
    expect(parsePeerJson('{"n\\u0000":"a\\ud800","ok":"😀"}')).toEqual({ 'n\ufffd': 'a\ufffd', ok: '😀' });
  });
});
