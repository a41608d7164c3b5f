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
 * Connect context for every RPC: the client address as fastify decided it (req.ip honours
 * TRUST_PROXY). The one function the Connect plugin's contextValues option uses.
 */
export function connectContextValues(req: { ip: string }): ContextValues {
  return createContextValues().set(clientAddressKey, req.ip);
}
