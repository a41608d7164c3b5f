import type { FastifyInstance } from 'fastify';
import { sendProblem } from './problem.js';

// CORS for every route: any origin ('*', no credentials), answered by one onRequest hook.
//
// The headers (the expose list alone is ~300 bytes) go only on requests that carry an Origin,
// i.e. from browsers, which always send one cross-origin; other clients never read them (issue 22:
// an answer's size is part of its cost). Every answer says `Vary: Origin`, so a shared cache never
// hands one variant to the other kind of client. A request without an Origin costs one header:
// @fastify/cors, used before, built its options object, the route's options and a resolver
// closure for every request of every route, browser or not (issue 22 measured it among the
// per-request hooks).
//
// A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered 204 here, before
// routing matters, with the methods and headers below; an OPTIONS with an Origin but no
// Access-Control-Request-Method is no preflight and is refused 400 (as @fastify/cors's strict
// mode did, in problem+json). A route whose config says `cors: { preflight: false }` (the gate:
// OPTIONS there is a gateway asking about an OPTIONS request) gets the headers and answers itself.

export interface CorsOptions {
  methods: readonly string[];
  allowedHeaders: readonly string[];
  exposedHeaders: readonly string[];
  maxAgeSeconds: number;
}

/** Route config of a route that answers its own OPTIONS requests (CORS headers still added). */
export interface RouteCorsConfig {
  cors?: { preflight?: boolean };
}

export function installCors(app: FastifyInstance, opts: CorsOptions): void {
  const methods = opts.methods.join(', ');
  const allowed = opts.allowedHeaders.join(', ');
  const exposed = opts.exposedHeaders.join(', ');
  const maxAge = String(opts.maxAgeSeconds);
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('vary', 'Origin');
    if (req.headers.origin === undefined) return done();
    reply.header('access-control-allow-origin', '*');
    reply.header('access-control-expose-headers', exposed);
    if (req.method !== 'OPTIONS' || (req.routeOptions.config as RouteCorsConfig | undefined)?.cors?.preflight === false) return done();
    if (req.headers['access-control-request-method'] === undefined) {
      sendProblem(reply, 'invalid_argument', 'an OPTIONS request with an Origin is a CORS preflight and needs Access-Control-Request-Method');
      return;
    }
    reply.header('access-control-allow-methods', methods);
    reply.header('access-control-allow-headers', allowed);
    reply.header('access-control-max-age', maxAge);
    // Safari waits for a body on a 204 without Content-Length.
    reply.code(204).header('content-length', '0').send();
  });
}
