import { describe, expect, it } from 'vitest';
import { canonicalMemoSize, canonicalServerUrl, hasQuery, identityCandidate, InvalidServerUrl, serverHandle, serverNameFromUrl, slugify, withoutQuery } from '../src/domain/server-identity.js';
import { classifyCategory } from '../src/domain/category.js';

describe('server identity', () => {
  it.each([
    ['HTTPS://Example.COM:443/mcp/', 'https://example.com/mcp'],
    ['http://example.com:80/', 'http://example.com'],
    ['http://example.com:8080/a/b/#frag', 'http://example.com:8080/a/b'],
    ['https://example.com/mcp?x=1', 'https://example.com/mcp?x=1'],
  ])('canonicalises %s', (input, want) => {
    expect(canonicalServerUrl(input)).toBe(want);
  });

  it.each(['', 'example.com', 'ftp://example.com', 'https://u:p@example.com', 'javascript:alert(1)', `https://e.com/${'a'.repeat(3000)}`])('refuses %s', (input) => {
    expect(() => canonicalServerUrl(input)).toThrow(InvalidServerUrl);
  });

  it('remembers accepted URLs within a bound, and refuses a refused one every time', () => {
    // Twice each: the second answer comes from the memo and must be the first.
    for (let round = 0; round < 2; round++) {
      expect(canonicalServerUrl('HTTPS://Memo.Example:443/mcp/')).toBe('https://memo.example/mcp');
      expect(() => canonicalServerUrl('https://u:p@memo.example')).toThrow(InvalidServerUrl);
      expect(() => canonicalServerUrl('ftp://memo.example')).toThrow(InvalidServerUrl);
    }
    // Long inputs are answered, never remembered; a new short one is.
    const before = canonicalMemoSize();
    const long = `https://memo.example/${'a'.repeat(1000)}`;
    expect(canonicalServerUrl(long)).toBe(long);
    expect(canonicalMemoSize()).toBe(before);
    canonicalServerUrl('https://memo.example/fresh');
    expect(canonicalMemoSize()).toBe(before + 1);
    // A client sending ever new URLs cannot grow it past its bound.
    for (let i = 0; i < 12_000; i++) canonicalServerUrl(`https://h${i}.memo.example/mcp`);
    expect(canonicalMemoSize()).toBe(8192);
    // Evicted early entries are computed again, to the same answer.
    expect(canonicalServerUrl('https://H0.memo.example:443/mcp/')).toBe('https://h0.memo.example/mcp');
  });

  it('derives name and slug', () => {
    expect(serverNameFromUrl('https://mcp.example.com:8443/v1/mcp')).toBe('mcp.example.com:8443/v1/mcp');
    expect(slugify('mcp.example.com:8443/v1/mcp')).toBe('mcp-example-com-8443-v1-mcp');
    expect(slugify('  Weather API!! ')).toBe('weather-api');
  });
});

describe('category classifier', () => {
  it('takes the first matching category in the documented order', () => {
    expect(classifyCategory(['api.weather.example.com/mcp'])).toBe('weather');
    expect(classifyCategory(['github-tools.example.com', 'create_issue'])).toBe('code');
    expect(classifyCategory(['x.example.com', 'get_forecast'])).toBe('weather');
    // "payment" (finance) comes before "search" in the order.
    expect(classifyCategory(['search-payments.example.com'])).toBe('finance');
    expect(classifyCategory(['foo.example.com'])).toBe('general');
  });
});

describe('identity helpers (docs/scoring.md "Server identity")', () => {
  it('a query is cut from a canonical URL, leaving a canonical URL', () => {
    expect(withoutQuery(canonicalServerUrl('https://x.example/mcp/?token=abc#f'))).toBe('https://x.example/mcp');
    expect(withoutQuery(canonicalServerUrl('https://x.example/?a=1'))).toBe('https://x.example');
    expect(withoutQuery('https://x.example/mcp')).toBe('https://x.example/mcp');
    expect(hasQuery('https://x.example/mcp?a')).toBe(true);
    expect(hasQuery(canonicalServerUrl('https://x.example/mcp?'))).toBe(false);
  });

  it('names, slugs and registry names are one handle by their slug form', () => {
    for (const id of ['io.github.acme/weather', 'IO.GITHUB.ACME/WEATHER', ' io-github-acme-weather ', 'io_github acme:weather']) {
      expect(serverHandle(id)).toBe('io-github-acme-weather');
    }
    expect(serverHandle('/// ')).toBe('');
  });

  it('collisions take the smallest free k, and the candidate name slugifies to the candidate slug', () => {
    expect(identityCandidate('io.github.acme/weather', 'io-github-acme-weather', 1)).toEqual({ name: 'io.github.acme/weather', slug: 'io-github-acme-weather' });
    for (const k of [2, 3, 17]) {
      const c = identityCandidate('io.github.acme/weather', 'io-github-acme-weather', k);
      expect(c).toEqual({ name: `io.github.acme/weather (${k})`, slug: `io-github-acme-weather-${k}` });
      expect(slugify(c.name)).toBe(c.slug);
    }
    // A name without letters or digits still gets a slug.
    expect(identityCandidate('[::]', '', 1)).toEqual({ name: '[::]', slug: 'server' });
    expect(identityCandidate('[::]', '', 2)).toEqual({ name: '[::] (2)', slug: 'server-2' });
  });
});
