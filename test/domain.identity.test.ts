import { describe, expect, it } from 'vitest';
import { canonicalServerUrl, InvalidServerUrl, serverNameFromUrl, slugify } from '../src/domain/server-identity.js';
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
