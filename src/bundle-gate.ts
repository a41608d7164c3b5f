import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyServerFactory } from 'fastify';
import type http from 'node:http';
import { randomUUID } from 'node:crypto';
import { INTERFACE_VERSION, type Config } from './config.js';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { connectContextValues, fastifyTrustProxy } from './http/client-address.js';
import { createDualProtocolServer } from './http/listener.js';
import { problemFromError, sendProblem, trackRoutes } from './http/problem.js';
import { PROBLEMS } from './errors.js';
import { connectPlugin } from './http/connect-adapter.js';
import { installRateLimits } from './http/rate-limit.js';
import { installBodyBudget } from './http/body-budget.js';
import { gateRoutes } from './http/routes/gate.js';
import { answerClientError } from './http/socket-answers.js';
import { parseErrorsAreInvalidArgument } from './http/connect-parse-errors.js';
import { bundleGateSource, createBundleMirror, type BundleMirror } from './services/bundle-gate.js';
import { createGateService } from './services/gate.js';
import { EXT_AUTHZ_MAX_BYTES } from './domain/gate.js';
import { createRateLimiter } from './services/rate-limits.js';

// The database-less gate (GATE_BUNDLE_URL; docs/bundles.md "A gate from a bundle"): /v1/gate and
// Envoy ext_authz answered from a mirrored, verified bundle, so a gateway's decision stays inside
// its cluster. /healthz and /readyz say how fresh the bundle is; every other path is a 503 problem
// naming what this instance is. No database is opened and no key is held.

export interface BundleGate {
  readonly app: FastifyInstance;
  readonly config: Config;
  readonly mirror: BundleMirror;
  listen(): Promise<string>;
  close(): Promise<void>;
}

const GATE_PATHS = ['/v1/gate', '/v1/gate/*', '/healthz', '/readyz'];

export async function createBundleGate(config: Config, opts: { logger?: boolean; now?: () => Date; fetch?: typeof fetch } = {}): Promise<BundleGate> {
  if (!config.gateBundle.url) throw new Error('createBundleGate needs GATE_BUNDLE_URL');
  const now = opts.now ?? (() => new Date());
  const app = Fastify({
    serverFactory: ((handler: Parameters<typeof createDualProtocolServer>[0]) => createDualProtocolServer(handler, config.http)) as unknown as FastifyServerFactory<http.Server>,
    trustProxy: fastifyTrustProxy(config.trustProxy),
    bodyLimit: config.bodyLimit,
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,64}$/.test(given) ? given : randomUUID();
    },
    frameworkErrors: (_err, _req, reply) => sendProblem(reply, 'invalid_argument', 'the request is malformed'),
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => answerClientError(err, socket, config.http.requestTimeoutMs),
    logger:
      opts.logger === false
        ? false
        : {
            level: config.logLevel,
            serializers: { req: (req) => ({ method: req.method, url: req.url, id: req.id }), res: (res) => ({ statusCode: res.statusCode }) },
          },
    logController: new LogController({ disableRequestLogging: config.logLevel !== 'debug' && config.logLevel !== 'trace' }),
  });
  const mirror = createBundleMirror({
    url: config.gateBundle.url,
    jwks: config.gateBundle.jwks,
    refreshSeconds: config.gateBundle.refreshSeconds,
    cacheFile: config.gateBundle.cacheFile,
    now,
    fetch: opts.fetch,
    onError: (err) => app.log.warn({ err: { message: (err as Error)?.message ?? String(err) } }, 'bundle refresh failed; a bundle already held is kept until it expires'),
  });
  const limits = createRateLimiter(config);
  // No verdict cache here: a look-up is a map read, and a cached verdict could outlive the
  // bundle's expiry by GATE_CACHE_SECONDS.
  const gate = createGateService({ config: { ...config, gate: { ...config.gate, cacheSeconds: 0 } }, now }, bundleGateSource(mirror, now), limits);

  trackRoutes(app);
  app.setErrorHandler((err, req, reply) => {
    const p = problemFromError(err);
    if (PROBLEMS[p.code].status >= 500 && p.code !== 'unavailable') req.log.error({ err }, 'request failed');
    return sendProblem(reply, p.code, p.detail, p);
  });
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id);
    reply.header('x-interface-version', INTERFACE_VERSION);
    done();
  });
  // Every answer says which bundle this instance holds and how old it is.
  app.addHook('onSend', (_req, reply, payload, done) => {
    const s = mirror.status();
    if (s.bundle) {
      reply.header('x-trust-bundle', s.bundle.bundle_id);
      reply.header('x-trust-bundle-age', String(s.bundle.age_seconds));
    }
    done(null, payload);
  });
  installRateLimits(app, limits, {
    table: new Map([
      ['/v1/gate', 'gate'],
      ['/v1/gate/*', 'gate'],
    ]),
    searched: new Map(),
    probing: new Map(),
    pages: new Set(),
  });
  installBodyBudget(app, { limit: config.http.bodyBudgetBytes, defaultLimit: config.bodyLimit });
  await app.register(connectPlugin, {
    routes: (router) => {
      // The same message limit as the full service's ext_authz (a CheckRequest may carry the
      // checked request's body); until 2026-11-27 this gate read messages of any size.
      router.service(Authorization, { check: gate.check }, { readMaxBytes: EXT_AUTHZ_MAX_BYTES });
      parseErrorsAreInvalidArgument(router);
    },
    contextValues: connectContextValues,
    readMaxBytes: config.bodyLimit,
  });
  gateRoutes(app, { services: { gate } });

  const health = (ready: boolean) => async (_req: unknown, reply: FastifyReply) => {
    const s = mirror.status();
    if (s.state === 'fresh' || s.state === 'stale') return { status: ready ? 'ready' : s.state === 'fresh' ? 'ok' : 'stale', mode: 'bundle', bundle: s };
    return sendProblem(reply, 'unavailable', s.state === 'expired' ? `the bundle expired at ${s.bundle!.expires_at} and no newer one could be fetched` : 'no bundle has been fetched yet', {
      extra: { mode: 'bundle', bundle: s },
      headers: { 'retry-after': String(Math.min(60, config.gateBundle.refreshSeconds)) },
    });
  };
  app.get('/healthz', health(false));
  app.get('/readyz', health(true));
  // Not a full observatory: no database, no scores, no receipts. Say so instead of 404.
  app.setNotFoundHandler((req, reply) =>
    sendProblem(reply, 'unavailable', `this instance is a gate answering from a bundle (GATE_BUNDLE_URL): it serves only ${GATE_PATHS.join(', ')} and Envoy ext_authz; ask ${new URL(config.gateBundle.url!).origin} for ${req.url.split('?')[0]}`, {
      extra: { mode: 'bundle' },
    }),
  );

  let closing: Promise<void> | null = null;
  return {
    app,
    config,
    mirror,
    async listen() {
      await mirror.start();
      return app.listen({ port: config.port, host: config.host });
    },
    close() {
      closing ??= (async () => {
        mirror.stop();
        await app.close();
      })();
      return closing;
    },
  };
}
