import dns from 'node:dns';
import net from 'node:net';
import { syncBuiltinESMExports } from 'node:module';

// Tests only ever send packets to 127.0.0.1 / ::1. Code under test that would reach another host
// (a probe fed a random URL by a fuzzer, a registry client) gets ECONNREFUSED / ENOTFOUND at the
// socket and resolver instead: the guard wraps net.Socket#connect and dns lookups in this process,
// getaddrinfo (dns.lookup) and the c-ares resolvers the safe client asks (Resolver#resolve4/6).

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1']);
const isLoopback = (host: unknown) => host === undefined || (typeof host === 'string' && (LOOPBACK.has(host) || /^127\./.test(host)));

let installed: (() => void) | null = null;
/** Host names and addresses the guard refused (so a test can show that it held). */
export const refused: string[] = [];

export function installLoopbackGuard(): () => void {
  if (installed) return installed;
  const origConnect = net.Socket.prototype.connect;
  const origLookup = dns.lookup;
  const origPLookup = dns.promises.lookup;
  const fail = (host: string, code: string) => Object.assign(new Error(`${code} ${host} (test loopback guard)`), { code, hostname: host });

  net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
    const first = args[0];
    const opts = (Array.isArray(first) ? first[0] : first) as { host?: string; path?: string } | number | string;
    const host = typeof opts === 'object' && opts !== null ? (opts.path ? undefined : (opts.host ?? 'localhost')) : typeof opts === 'number' ? (typeof args[1] === 'string' ? args[1] : 'localhost') : undefined;
    if (!isLoopback(host)) {
      refused.push(String(host));
      process.nextTick(() => this.destroy(fail(String(host), 'ECONNREFUSED')));
      return this;
    }
    return (origConnect as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof origConnect;

  (dns as { lookup: unknown }).lookup = function (host: string, ...rest: unknown[]) {
    const cb = rest[rest.length - 1] as (err: Error | null) => void;
    if (!isLoopback(host)) {
      refused.push(host);
      process.nextTick(() => cb(fail(host, 'ENOTFOUND')));
      return;
    }
    return (origLookup as (...a: unknown[]) => void)(host, ...rest);
  };
  (dns.promises as { lookup: unknown }).lookup = async (host: string, ...rest: unknown[]) => {
    if (!isLoopback(host)) {
      refused.push(host);
      throw fail(host, 'ENOTFOUND');
    }
    return (origPLookup as (...a: unknown[]) => Promise<unknown>)(host, ...rest);
  };
  // The c-ares queries: every method of both Resolver classes that asks a name server. Each sends
  // a packet to the system's name servers, whatever the name ('localhost' too), so all are refused.
  const resolverProtos = [dns.promises.Resolver.prototype, dns.Resolver.prototype] as unknown as Record<string, unknown>[];
  const queryMethods = ['resolve', 'resolve4', 'resolve6', 'resolveAny', 'resolveCname', 'resolveCaa', 'resolveMx', 'resolveNaptr', 'resolveNs', 'resolvePtr', 'resolveSoa', 'resolveSrv', 'resolveTxt', 'reverse'];
  const origQueries = resolverProtos.map((proto) => Object.fromEntries(queryMethods.map((m) => [m, proto[m]])));
  resolverProtos.forEach((proto, i) => {
    const promises = i === 0;
    for (const m of queryMethods) {
      proto[m] = function (host: string, ...rest: unknown[]) {
        refused.push(host);
        const err = fail(host, 'ENOTFOUND');
        if (promises) return Promise.reject(err);
        const cb = rest[rest.length - 1] as (err: Error | null) => void;
        process.nextTick(() => cb(err));
        return {};
      };
    }
  });
  syncBuiltinESMExports();
  installed = () => {
    net.Socket.prototype.connect = origConnect;
    (dns as { lookup: unknown }).lookup = origLookup;
    (dns.promises as { lookup: unknown }).lookup = origPLookup;
    resolverProtos.forEach((proto, i) => Object.assign(proto, origQueries[i]));
    syncBuiltinESMExports();
    installed = null;
  };
  return installed;
}
