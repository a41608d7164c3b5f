// The network of a client address (docs/integrity.md "Sources without identities"): the one
// definition every per-address decision uses, so that report sources, the registration limit,
// the family of a registered key, the creation bound on new servers and the rate-limit buckets
// all count the same thing. One subscriber is routinely given a whole IPv6 /64; counting full
// IPv6 addresses would let one home connection pose as 2^64 clients.
import { isIPv4, isIPv6 } from 'node:net';
import { stringMemo } from './string-memo.js';

// Per request on the hot paths (a report's source, the body budget, rate-limit buckets), for the
// same few client addresses again and again: at most 8,192 remembered, addresses of at most 64
// characters, about 1 MB at most.
const networkMemo = stringMemo(networkOf, { maxEntries: 8192, maxLength: 64 });

/**
 * IPv4: the address itself (/32). IPv6: its /64 prefix, written `a:b:c:d::/64` (groups in
 * lower-case hex without leading zeros). An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, also
 * in hex) is its IPv4 address. Brackets and a zone (`%eth0`) are ignored. Anything that is not an
 * IP address is returned trimmed and lower-cased, so it still keys one bucket.
 */
export function clientNetwork(address: string): string {
  return networkMemo(address);
}

function networkOf(address: string): string {
  const a = address.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/%.*$/, '');
  if (isIPv4(a)) return a;
  if (!isIPv6(a)) return a;
  const g = ipv6Groups(a);
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  return `${g.slice(0, 4).map((x) => x.toString(16)).join(':')}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address (an embedded IPv4 tail is two groups). */
function ipv6Groups(a: string): number[] {
  const parse = (part: string): number[] => {
    if (part === '') return [];
    return part.split(':').flatMap((p) => {
      if (p.includes('.')) {
        const [w, x, y, z] = p.split('.').map(Number) as [number, number, number, number];
        return [(w << 8) | x, (y << 8) | z];
      }
      return [parseInt(p, 16)];
    });
  };
  const gap = a.indexOf('::');
  if (gap === -1) return parse(a);
  const head = parse(a.slice(0, gap));
  const tail = parse(a.slice(gap + 2));
  return [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

/**
 * One client network's share of an instance-wide pool of `total` (probes running, open A2A
 * subscriptions): an eighth of it, at least `atLeast`, so one network cannot hold the whole pool
 * while a few can still use it fully.
 */
export function networkShare(total: number, atLeast = 2): number {
  return Math.max(atLeast, Math.floor(total / 8));
}

/**
 * Adds `delta` to a client network's count in `counts` (connections held, body bytes reserved),
 * dropping the entry when it reaches 0, so the map holds only networks with something open.
 * Returns the new count.
 */
export function addToNetwork(counts: Map<string, number>, network: string, delta: number): number {
  const n = (counts.get(network) ?? 0) + delta;
  if (n <= 0) counts.delete(network);
  else counts.set(network, n);
  return n;
}
