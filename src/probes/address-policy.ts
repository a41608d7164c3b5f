import ipaddr from 'ipaddr.js';

// Which IP addresses an outbound probe may connect to. Pure: no DNS, no sockets. The safe
// client (safe-fetch.ts) resolves a host itself, runs every answer through classifyAddress and
// then connects pinned to an address that passed, so a DNS answer cannot change in between.

/**
 * Why a range is not public:
 * - `private`: reachable only inside some network (loopback, RFC 1918, CGNAT, link-local, ULA,
 *   documentation/benchmark ranges). ALLOW_PRIVATE_TARGETS=1 lets probes reach these.
 * - `never`: never a sensible probe target even in development (cloud metadata and credential
 *   services, multicast, broadcast, the unspecified address, addresses that embed an IPv4 address
 *   inside IPv6).
 */
export type RangeClass = 'private' | 'never';

interface Range {
  cidr: [ipaddr.IPv4 | ipaddr.IPv6, number];
  name: string;
  cls: RangeClass;
}

function r(cidr: string, name: string, cls: RangeClass): Range {
  return { cidr: ipaddr.parseCIDR(cidr), name, cls };
}

// Order matters: the first match names the reason, so specific ranges come before wider ones.
const V4_RANGES: Range[] = [
  // Metadata and credential services a host in a cloud or container platform reaches without any
  // credential of its own: a probe that reached one could read the host's credentials. Some sit in
  // private ranges (which ALLOW_PRIVATE_TARGETS opens), 168.63.129.16 in public address space.
  r('169.254.169.254/32', 'cloud metadata service (169.254.169.254)', 'never'),
  r('169.254.170.2/32', 'AWS ECS task credentials service (169.254.170.2)', 'never'),
  r('169.254.170.23/32', 'AWS EKS Pod Identity credentials agent (169.254.170.23)', 'never'),
  r('168.63.129.16/32', 'Azure WireServer (168.63.129.16)', 'never'),
  r('100.100.100.200/32', 'Alibaba Cloud metadata service (100.100.100.200)', 'never'),
  r('192.0.0.192/32', 'Oracle Cloud metadata service (192.0.0.192)', 'never'),
  r('169.254.0.23/32', 'Tencent Cloud metadata service (169.254.0.23)', 'never'),
  r('169.254.42.42/32', 'Scaleway metadata service (169.254.42.42)', 'never'),
  r('255.255.255.255/32', 'limited broadcast (255.255.255.255)', 'never'),
  r('0.0.0.0/8', '"this network" / unspecified (0.0.0.0/8)', 'never'),
  r('224.0.0.0/4', 'multicast (224.0.0.0/4)', 'never'),
  r('127.0.0.0/8', 'loopback (127.0.0.0/8)', 'private'),
  r('10.0.0.0/8', 'private network (RFC 1918, 10.0.0.0/8)', 'private'),
  r('172.16.0.0/12', 'private network (RFC 1918, 172.16.0.0/12)', 'private'),
  r('192.168.0.0/16', 'private network (RFC 1918, 192.168.0.0/16)', 'private'),
  r('100.64.0.0/10', 'carrier-grade NAT (RFC 6598, 100.64.0.0/10)', 'private'),
  r('169.254.0.0/16', 'link-local (169.254.0.0/16)', 'private'),
  r('192.0.0.0/24', 'IETF protocol assignments (192.0.0.0/24)', 'private'),
  r('192.0.2.0/24', 'documentation TEST-NET-1 (192.0.2.0/24)', 'private'),
  r('192.88.99.0/24', 'deprecated 6to4 relay anycast (192.88.99.0/24)', 'private'),
  r('198.18.0.0/15', 'benchmarking (198.18.0.0/15)', 'private'),
  r('198.51.100.0/24', 'documentation TEST-NET-2 (198.51.100.0/24)', 'private'),
  r('203.0.113.0/24', 'documentation TEST-NET-3 (203.0.113.0/24)', 'private'),
  r('240.0.0.0/4', 'reserved (240.0.0.0/4)', 'private'),
];

const V6_RANGES: Range[] = [
  r('::/128', 'unspecified (::)', 'never'),
  r('::1/128', 'loopback (::1)', 'private'),
  r('fd00:ec2::254/128', 'cloud metadata service (fd00:ec2::254)', 'never'),
  r('fd00:ec2::23/128', 'AWS EKS Pod Identity credentials agent (fd00:ec2::23)', 'never'),
  r('fd20:ce::254/128', 'Google Cloud metadata service over IPv6 (fd20:ce::254)', 'never'),
  r('fe80::a9fe:a9fe/128', 'OpenStack metadata service over IPv6 (fe80::a9fe:a9fe)', 'never'),
  r('::ffff:0:0/96', 'IPv4-mapped IPv6 (::ffff:0:0/96)', 'never'),
  r('::ffff:0:0:0/96', 'IPv4-translated IPv6 (::ffff:0:0:0/96)', 'never'),
  r('64:ff9b::/96', 'NAT64 IPv4-translated (64:ff9b::/96)', 'never'),
  r('64:ff9b:1::/48', 'local NAT64 (64:ff9b:1::/48)', 'never'),
  r('::/96', 'IPv4-compatible IPv6 (::/96, deprecated)', 'never'),
  r('2002::/16', '6to4 (2002::/16, embeds an IPv4 address)', 'never'),
  r('2001::/32', 'Teredo (2001::/32, embeds an IPv4 address)', 'never'),
  r('ff00::/8', 'multicast (ff00::/8)', 'never'),
  r('fe80::/10', 'link-local (fe80::/10)', 'private'),
  r('fec0::/10', 'deprecated site-local (fec0::/10)', 'private'),
  r('fc00::/7', 'unique local address (fc00::/7)', 'private'),
  r('100::/64', 'discard-only (100::/64)', 'private'),
  r('2001:db8::/32', 'documentation (2001:db8::/32)', 'private'),
  r('2001::/23', 'IETF protocol assignments (2001::/23)', 'private'),
];

const V6_GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');

export type AddressVerdict =
  | { allowed: true; address: string; family: 4 | 6; range: string | null }
  | { allowed: false; address: string; family: 4 | 6 | null; range: string; reason: string };

export interface AddressPolicy {
  /** ALLOW_PRIVATE_TARGETS: let probes reach `private` ranges (never `never` ranges). */
  allowPrivate: boolean;
}

/** Strips brackets and an IPv6 zone id ("fe80::1%eth0"); the zone never makes an address public. */
function bare(address: string): string {
  let a = address.trim();
  if (a.startsWith('[') && a.endsWith(']')) a = a.slice(1, -1);
  const zone = a.indexOf('%');
  return zone >= 0 ? a.slice(0, zone) : a;
}

/** True when the string is an IP literal in a form we accept (dotted-quad IPv4 or IPv6). */
export function isIpLiteral(address: string): boolean {
  const a = bare(address);
  return ipaddr.IPv4.isValidFourPartDecimal(a) || ipaddr.IPv6.isValid(a);
}

/**
 * Classifies one address. Only strict dotted-quad IPv4 and valid IPv6 are accepted; anything
 * else (octal, hex or short IPv4 forms that resolvers interpret differently) is refused.
 */
export function classifyAddress(address: string, policy: AddressPolicy): AddressVerdict {
  const a = bare(address);
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  let family: 4 | 6;
  if (ipaddr.IPv4.isValidFourPartDecimal(a)) {
    ip = ipaddr.IPv4.parse(a);
    family = 4;
  } else if (ipaddr.IPv6.isValid(a)) {
    ip = ipaddr.IPv6.parse(a);
    family = 6;
  } else {
    return { allowed: false, address, family: null, range: 'invalid', reason: `"${address}" is not a valid IP address` };
  }
  const ranges = family === 4 ? V4_RANGES : V6_RANGES;
  for (const range of ranges) {
    if (ip.kind() === range.cidr[0].kind() && ip.match(range.cidr)) {
      if (range.cls === 'private' && policy.allowPrivate) return { allowed: true, address: ip.toString(), family, range: range.name };
      const why =
        range.cls === 'never'
          ? `${ip.toString()} is in ${range.name}, which probes never reach`
          : `${ip.toString()} is in ${range.name}; set ALLOW_PRIVATE_TARGETS=1 to probe such addresses (development only)`;
      return { allowed: false, address: ip.toString(), family, range: range.name, reason: why };
    }
  }
  if (family === 6 && !ip.match(V6_GLOBAL_UNICAST)) {
    const name = 'reserved IPv6 (outside global unicast 2000::/3)';
    if (policy.allowPrivate) return { allowed: true, address: ip.toString(), family, range: name };
    return { allowed: false, address: ip.toString(), family, range: name, reason: `${ip.toString()} is ${name}` };
  }
  return { allowed: true, address: ip.toString(), family, range: null };
}

export class RedirectRefused extends Error {}

/**
 * The next URL of a redirect, decided by hand: resolved against the current URL, http(s) only,
 * never from https down to http, no credentials in the URL.
 */
export function redirectTarget(from: URL, location: string | undefined): URL {
  if (!location) throw new RedirectRefused(`redirect from ${from.href} has no Location header`);
  let next: URL;
  try {
    next = new URL(location, from);
  } catch {
    throw new RedirectRefused(`redirect from ${from.href} to an invalid Location`);
  }
  if (next.protocol !== 'http:' && next.protocol !== 'https:') throw new RedirectRefused(`redirect to ${next.protocol} is refused: only http and https are followed`);
  if (from.protocol === 'https:' && next.protocol === 'http:') throw new RedirectRefused(`redirect from https to http (${next.origin}) is refused`);
  if (next.username || next.password) throw new RedirectRefused('redirect to a URL with credentials is refused');
  return next;
}

/**
 * Whether a redirect from `from` to `to` stays with the same server: the same origin, or the
 * upgrade of the same host from http to https on the default ports (the rule of the MCP SDK's own
 * same-origin redirect policy).
 */
export function withinOrigin(from: URL, to: URL): boolean {
  if (from.protocol === to.protocol && from.host === to.host) return true;
  return from.protocol === 'http:' && to.protocol === 'https:' && from.hostname === to.hostname && !from.port && !to.port;
}

/** Method and body after a redirect, as fetch does it: 303 (and 301/302 after POST) become GET. */
export function redirectMethod(status: number, method: string): { method: string; keepBody: boolean } {
  if (status === 303 && method !== 'HEAD') return { method: 'GET', keepBody: false };
  if ((status === 301 || status === 302) && method === 'POST') return { method: 'GET', keepBody: false };
  return { method, keepBody: true };
}
