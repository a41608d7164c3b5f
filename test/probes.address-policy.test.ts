import { describe, expect, it } from 'vitest';
import { classifyAddress, isIpLiteral, redirectMethod, redirectTarget, RedirectRefused, withinOrigin } from '../src/probes/address-policy.js';

const strict = { allowPrivate: false };
const dev = { allowPrivate: true };

describe('address policy (pure, no packets)', () => {
  it.each([
    ['8.8.8.8'],
    ['1.1.1.1'],
    ['93.184.216.34'],
    ['172.32.0.1'], // just outside 172.16/12
    ['100.128.0.1'], // just outside 100.64/10
    ['192.169.0.1'],
    ['2606:4700:4700::1111'],
    ['2a00:1450:4001:80b::200e'],
  ])('allows public %s', (a) => {
    const v = classifyAddress(a, strict);
    expect(v.allowed).toBe(true);
  });

  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.1.2.3', 'RFC 1918'],
    ['172.16.0.1', 'RFC 1918'],
    ['172.31.255.255', 'RFC 1918'],
    ['192.168.1.1', 'RFC 1918'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.255', 'carrier-grade NAT'],
    ['169.254.1.1', 'link-local'],
    ['192.0.2.5', 'documentation'],
    ['198.18.0.1', 'benchmarking'],
    ['240.0.0.1', 'reserved'],
    ['::1', 'loopback'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['[fe80::abcd]', 'link-local'],
    ['fc00::1', 'unique local'],
    ['fd12:3456::1', 'unique local'],
    ['fec0::1', 'site-local'],
    ['2001:db8::1', 'documentation'],
    ['3fff::1', null],
  ])('refuses private %s by default and allows it with ALLOW_PRIVATE_TARGETS', (a, why) => {
    const v = classifyAddress(a, strict);
    if (why === null) {
      expect(v.allowed).toBe(true); // 3fff::/20 is global unicast space today
      return;
    }
    expect(v.allowed).toBe(false);
    if (!v.allowed) {
      expect(v.range).toContain(why);
      expect(v.reason).toContain('ALLOW_PRIVATE_TARGETS');
    }
    expect(classifyAddress(a, dev).allowed).toBe(true);
  });

  it.each([
    ['169.254.169.254', 'metadata'],
    ['fd00:ec2::254', 'metadata'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'this network'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['::', 'unspecified'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'IPv4-mapped'],
    ['::ffff:8.8.8.8', 'IPv4-mapped'],
    ['::ffff:a9fe:a9fe', 'IPv4-mapped'],
    ['::ffff:0:7f00:1', 'IPv4-translated'],
    ['64:ff9b::7f00:1', 'NAT64'],
    ['::127.0.0.1', 'IPv4-'], // ipaddr.js reads the dotted tail as IPv4-mapped
    ['::7f00:1', 'IPv4-compatible'],
    ['2002:7f00:1::1', '6to4'],
    ['2001:0:4136:e378::1', 'Teredo'],
  ])('always refuses %s (%s), even with ALLOW_PRIVATE_TARGETS', (a, why) => {
    for (const policy of [strict, dev]) {
      const v = classifyAddress(a, policy);
      expect(v.allowed).toBe(false);
      if (!v.allowed) {
        expect(v.range).toContain(why);
        expect(v.reason).toContain('never');
      }
    }
  });

  // Credential and metadata services of cloud and container platforms: a probe that reached one
  // (a target or a redirect hop resolving to it) could read the host's credentials. Never, even
  // with ALLOW_PRIVATE_TARGETS, and 168.63.129.16 is public address space, so allowed by default before.
  it.each([
    ['169.254.170.2', 'AWS ECS'],
    ['169.254.170.23', 'EKS Pod Identity'],
    ['fd00:ec2::23', 'EKS Pod Identity'],
    ['168.63.129.16', 'Azure WireServer'],
    ['100.100.100.200', 'Alibaba'],
    ['192.0.0.192', 'Oracle'],
    ['169.254.0.23', 'Tencent'],
    ['169.254.42.42', 'Scaleway'],
    ['fd20:ce::254', 'Google Cloud'],
    ['fe80::a9fe:a9fe', 'OpenStack'],
    ['fe80::a9fe:a9fe%eth0', 'OpenStack'],
  ])('always refuses the credential service %s (%s), even with ALLOW_PRIVATE_TARGETS', (a, why) => {
    for (const policy of [strict, dev]) {
      const v = classifyAddress(a, policy);
      expect(v.allowed, `${a} ${JSON.stringify(policy)}`).toBe(false);
      if (!v.allowed) {
        expect(v.range).toContain(why);
        expect(v.reason).toContain('never');
      }
    }
  });

  it('keeps the neighbours of those services in their ordinary class', () => {
    expect(classifyAddress('168.63.129.17', strict).allowed).toBe(true);
    expect(classifyAddress('100.100.100.201', dev).allowed).toBe(true);
    expect(classifyAddress('169.254.170.3', dev).allowed).toBe(true);
    expect(classifyAddress('192.0.0.193', dev).allowed).toBe(true);
  });

  it('refuses anything that is not a strict IP literal', () => {
    for (const a of ['0x7f.1', '2130706433', '127.1', '017700000001', 'localhost', '', '1.2.3.4.5', '256.1.1.1']) {
      const v = classifyAddress(a, dev);
      expect(v.allowed, a).toBe(false);
      if (!v.allowed) expect(v.range).toBe('invalid');
      expect(isIpLiteral(a)).toBe(false);
    }
    expect(isIpLiteral('[::1]')).toBe(true);
    expect(isIpLiteral('10.0.0.1')).toBe(true);
  });

  it('refuses reserved IPv6 outside 2000::/3 by default', () => {
    const v = classifyAddress('4000::1', strict);
    expect(v.allowed).toBe(false);
    expect(classifyAddress('4000::1', dev).allowed).toBe(true);
  });
});

describe('redirect rules (pure)', () => {
  const from = new URL('https://a.example.com/x/y');
  it('resolves relative locations and keeps https', () => {
    expect(redirectTarget(from, '/z').href).toBe('https://a.example.com/z');
    expect(redirectTarget(from, 'w').href).toBe('https://a.example.com/x/w');
    expect(redirectTarget(new URL('http://a.example.com/'), 'https://b.example.com/').href).toBe('https://b.example.com/');
  });
  it('never goes from https down to http, nor to other schemes or credentials', () => {
    expect(() => redirectTarget(from, 'http://a.example.com/')).toThrow(RedirectRefused);
    expect(() => redirectTarget(from, 'file:///etc/passwd')).toThrow(/only http and https/);
    expect(() => redirectTarget(from, 'gopher://x/')).toThrow(RedirectRefused);
    expect(() => redirectTarget(from, 'https://u:p@b.example.com/')).toThrow(/credentials/);
    expect(() => redirectTarget(from, undefined)).toThrow(/no Location/);
    expect(() => redirectTarget(from, 'http://[::1')).toThrow(RedirectRefused);
  });
  it('tells a redirect within the origin (or its upgrade to https) from one to another origin', () => {
    const u = (x: string) => new URL(x);
    expect(withinOrigin(u('https://a.example.com/mcp'), u('https://a.example.com/v2/mcp'))).toBe(true);
    expect(withinOrigin(u('http://a.example.com/mcp'), u('https://a.example.com/mcp'))).toBe(true);
    expect(withinOrigin(u('https://a.example.com/mcp'), u('https://b.example.com/mcp'))).toBe(false);
    expect(withinOrigin(u('https://a.example.com/mcp'), u('https://a.example.com:8443/mcp'))).toBe(false);
    expect(withinOrigin(u('http://a.example.com:8080/mcp'), u('https://a.example.com:8080/mcp'))).toBe(false);
    expect(withinOrigin(u('http://127.0.0.1:1/'), u('http://127.0.0.1:2/'))).toBe(false);
  });
  it('turns 303, and 301/302 after POST, into GET without a body', () => {
    expect(redirectMethod(303, 'POST')).toEqual({ method: 'GET', keepBody: false });
    expect(redirectMethod(302, 'POST')).toEqual({ method: 'GET', keepBody: false });
    expect(redirectMethod(307, 'POST')).toEqual({ method: 'POST', keepBody: true });
    expect(redirectMethod(308, 'GET')).toEqual({ method: 'GET', keepBody: true });
  });
});
