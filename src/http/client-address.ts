import type { Config } from '../config.js';

// The client address (DECISIONS.md "Client address and report sources"): the socket's peer, or,
// when TRUST_PROXY is set, the address X-Forwarded-For names. Fastify's trustProxy option
// implements exactly that, so we map our setting onto it. A hop count becomes a trust function
// (fastify 5 treats a bare number as "trust nothing", failing closed): hop i is trusted when
// i < count, i.e. the socket peer and the next count-1 proxies.
// The address is used in memory only; never log or store it.
export function fastifyTrustProxy(trust: Config['trustProxy']): boolean | string[] | ((addr: string, hop: number) => boolean) {
  if (trust === false) return false;
  if (typeof trust === 'number') return (_addr: string, hop: number) => hop < trust;
  return trust;
}
