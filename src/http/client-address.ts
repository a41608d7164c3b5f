import type { IncomingMessage } from 'node:http';
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import proxyAddr from '@fastify/proxy-addr';
import { createContextValues, type ContextValues } from '@connectrpc/connect';
import type { Config } from '../config.js';
import { clientAddressKey } from '../services/context.js';

// The client address (DECISIONS.md "Client address and report sources"): the socket's peer, or,
// when TRUST_PROXY is set, the address X-Forwarded-For names. Fastify's trustProxy option
// implements exactly that, so we map our setting onto it. A hop count becomes a trust function
// (fastify 5 treats a bare number as "trust nothing", failing closed): hop i is trusted when
// i < count, i.e. the socket peer and the next count-1 proxies.
// The address is used in memory only; never log or store it.
export function fastifyTrustProxy(trust: Config['trustProxy']): false | string[] | ((addr: string, hop: number) => boolean) {
  if (trust === false) return false;
  // Fastify 5 treats a bare hop count as "trust nothing" (fail closed); DECISIONS.md says `1`
  // trusts one hop, so the count becomes proxy-addr's (address, hop index) predicate.
  if (typeof trust === 'number') return (_addr, hop) => hop < trust;
  if (trust === true) return (_addr, hop) => hop < 1;
  return trust;
}

/**
 * The client address of a request outside fastify (the fast paths of src/http/fast-paths.ts),
 * exactly as fastify's `req.ip` reads it for the same setting: the same library (fastify's own
 * @fastify/proxy-addr) with the same trust function, or the socket's peer without TRUST_PROXY.
 */
export function clientAddressOf(trust: Config['trustProxy']): (req: IncomingMessage) => string | undefined {
  const tp = fastifyTrustProxy(trust);
  if (tp === false) return (req) => req.socket.remoteAddress;
  const fn = typeof tp === 'function' ? tp : proxyAddr.compile(tp);
  return (req) => proxyAddr(req, fn);
}

/**
 * Whether a socket's peer is a proxy TRUST_PROXY trusts: its connections carry many clients, so
 * none counts against one client's limit. A hop count (or `1`) trusts every peer, as fastify does
 * for the client address; a list trusts the peers it names (addresses and CIDRs).
 */
export function trustedPeer(trust: Config['trustProxy']): (address: string) => boolean {
  if (trust === false) return () => false;
  if (!Array.isArray(trust)) return () => true;
  const list = new BlockList();
  for (const item of trust) {
    const [address = '', prefix] = item.split('/');
    const type = isIPv4(address) ? 'ipv4' : 'ipv6';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  // IPv4 rules also match IPv4-mapped IPv6 peers (a listener on ::).
  return (address) => (isIPv4(address) ? list.check(address, 'ipv4') : isIPv6(address) && list.check(address, 'ipv6'));
}

/**
 * Connect context for every RPC: the client address as fastify decided it (req.ip honours
 * TRUST_PROXY). The one function the Connect plugin's contextValues option uses.
 */
export function connectContextValues(req: { ip: string }): ContextValues {
  return createContextValues().set(clientAddressKey, req.ip);
}
