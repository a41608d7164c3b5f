import type { GateOutcome } from '../services/gate.js';
import type { RateDecision } from '../services/rate-limits.js';

// What the fast paths (src/http/fast-paths.ts) learned about a request before handing it to
// fastify: the route and the rate-limit hook use it instead of asking the service, or taking a
// rate-limit token, a second time. Set only in process, under a Symbol no client can name.

export interface HandOver {
  /** The service refused the call (or failed): the route throws it as its own. */
  refused?: { error: unknown };
  /** A gate decision the fast path does not answer itself (a denial): the route renders it. */
  outcome?: GateOutcome;
  /** The route's rate-limit decision, already taken for this request (null: no limit is on). */
  rate?: RateDecision | null;
}

const kHandOver = Symbol('what the fast path learned before handing this request to fastify');

/** Hands `req` to fastify's handler with what was learned about it. */
export function handOver(req: object, what: HandOver): void {
  (req as { [kHandOver]?: HandOver })[kHandOver] = what;
}

/** What the fast path learned about a request it handed over; undefined for every other request. */
export function handedOver(req: object): HandOver | undefined {
  return (req as { [kHandOver]?: HandOver })[kHandOver];
}
