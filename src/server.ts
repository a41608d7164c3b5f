import Fastify, { LogController, type FastifyInstance, type FastifyServerFactory } from 'fastify';
import type http from 'node:http';
import { cors as connectCors } from '@connectrpc/connect';
import { refuseUnknownMethods } from './http/unknown-methods.js';
import { fastPaths, type FastPaths } from './http/fast-paths.js';
import { requestIdOf } from './http/request-id.js';
import { INTERFACE_VERSION, type Config } from './config.js';
import { openDatabase, type Db } from './db/index.js';
import { createDualProtocolServer, type DualProtocolServer } from './http/listener.js';
import { createMetrics } from './http/metrics.js';
import { installCors } from './http/cors.js';
import { lazyRequestLogger } from './http/request-logger.js';
import { connectPlugin } from './http/connect-adapter.js';
import { installProblemHandlers, sendProblem, sendProblemToCaller, trackRoutes } from './http/problem.js';
import { answerClientError } from './http/socket-answers.js';
import { clientAddressOf, connectContextValues, fastifyTrustProxy } from './http/client-address.js';
import { registerRestRoutes } from './http/routes.js';
import { installRateLimits, rateLimitInterceptor } from './http/rate-limit.js';
import { installBodyBudget } from './http/body-budget.js';
import { installAnswerAdmission } from './http/answer-budget.js';
import { parseErrorsAreInvalidArgument } from './http/connect-parse-errors.js';
import { otlpExportsReadAsBytes } from './http/otlp-grpc.js';
import { registerHealth, registerReflection } from './http/grpc-introspection.js';
import { nativeHandlerErrors, refusalsCarryConnectErrors } from './http/rpc-errors.js';
import { createHealthMonitor, type HealthMonitor } from './services/health.js';
import { contractValidationInterceptor } from './http/contract-validation.js';
import { createServices, connectRoutes, type Services } from './services/index.js';
import { resolveKeyEncryptionKey, type KeyEncryptionKey } from './signing/key-encryption.js';
import { openKeyRing, type KeyRing } from './signing/keyring.js';
import { createReceiptIssuer } from './signing/receipts.js';

export interface Observatory {
  readonly app: FastifyInstance;
  readonly db: Db;
  readonly config: Config;
  readonly services: Services;
  /** The secret sealing private signing keys (null with SIGNING_KEY_JWK and no configured secret). */
  readonly kek: KeyEncryptionKey | null;
  /** grpc.health.v1's view of the process (SERVING while the database answers and it is not draining). */
  readonly health: HealthMonitor;
  /** Requests answered by the fast paths (cached trust reads, pre-flight checks, allowed gate decisions), not by fastify (src/http/fast-paths.ts). */
  fastPathAnswers(): number;
  /** Starts listening on config.host:config.port; resolves to the base URL actually bound. */
  listen(): Promise<string>;
  /** Graceful stop: stops accepting, lets in-flight requests finish, closes the database. */
  close(): Promise<void>;
}

export interface ObservatoryOptions {
  /** An already opened database (tests); otherwise the configured one is opened and migrated. */
  db?: Db;
  /** Logger settings override (tests pass false). */
  logger?: boolean;
  /** Where log lines go (default stdout); tests capture them. */
  logStream?: { write(line: string): void };
  /** The clock, injectable for tests. */
  now?: () => Date;
}

/** Builds the whole service: the one app builder used identically by main, the CLI and tests. */
export async function createObservatory(config: Config, opts: ObservatoryOptions = {}): Promise<Observatory> {
  const db = opts.db ?? (await openDatabase(config));
  const now = opts.now ?? (() => new Date());
  const startupNotes: string[] = [];
  let keyring: KeyRing;
  let kek: KeyEncryptionKey | null;
  try {
    const resolved = resolveKeyEncryptionKey(config, db);
    kek = resolved.kek;
    if (resolved.warning) startupNotes.push(resolved.warning);
    keyring = await openKeyRing(db, {
      signingKeyJwk: config.signingKeyJwk,
      kek,
      now,
      onError: (err) => app.log.warn({ err: { message: (err as Error)?.message ?? String(err) } }, 'could not re-read the signing keys; retrying'),
    });
  } catch (err) {
    // A database we opened ourselves is ours to close when start-up fails.
    if (!opts.db) await db.close().catch(() => {});
    throw err;
  }
  const receipts = createReceiptIssuer({ db, keyring, issuer: config.publicBaseUrl, now });
  const metrics = createMetrics(db);
  const services = createServices({
    db,
    config,
    now,
    keyring,
    receipts,
    observe: { ingestBatch: (n) => metrics.ingestBatch.observe(n), receiptBatch: (n) => metrics.receiptBatch.observe(n), otlpItems: metrics.otlpItems },
    onBackgroundError: (err) => app.log.warn({ err: { message: (err as Error)?.message ?? String(err) } }, 'background work failed; it retries on its next tick'),
  });

  const health = createHealthMonitor({ db, intervalMs: config.healthIntervalMs });
  let fast: FastPaths | undefined;
  const app = Fastify({
    // Cached trust reads, pre-flight checks and allowed gate decisions are answered before fastify's lifecycle;
    // everything else goes to fastify (src/http/fast-paths.ts).
    serverFactory: ((handler: Parameters<typeof createDualProtocolServer>[0]) => {
      fast = fastPaths(handler, {
        trust: services.trust,
        preflight: services.preflight,
        gate: services.gate,
        limits: services.limits,
        clientAddress: clientAddressOf(config.trustProxy),
        draining: () => health.draining,
        logsRequests: config.logLevel === 'debug' || config.logLevel === 'trace',
        metrics,
        onError: (err) => app.log.error({ err }, 'fast path answer failed'),
      });
      return createDualProtocolServer(refuseUnknownMethods(fast.handler), config.http);
    }) as unknown as FastifyServerFactory<http.Server>,
    trustProxy: fastifyTrustProxy(config.trustProxy),
    bodyLimit: config.bodyLimit,
    // Path parameters carry server names and URLs (/agent-query/{server_slug}); fastify's default is 100.
    routerOptions: { maxParamLength: 4096 },
    forceCloseConnections: 'idle',
    // A draining process refuses new requests itself (the onRequest hook below), in each
    // caller's protocol, instead of fastify's plain 503.
    return503OnClosing: false,
    genReqId: requestIdOf,
    // Errors the router raises before any handler: problem+json like everything else. An
    // over-long path parameter (e.g. /v1/receipt/<300 chars>) is a malformed parameter: 400.
    frameworkErrors: (err, _req, reply) => {
      if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') return sendProblem(reply, 'invalid_argument', 'a path parameter is longer than this service accepts');
      if (err.code === 'FST_ERR_BAD_URL') return sendProblem(reply, 'invalid_argument', 'the request URL is malformed');
      return sendProblem(reply, 'invalid_argument', 'the request is malformed');
    },
    // Requests node's HTTP parser rejects (unknown methods such as FOO, malformed headers, a
    // stray HTTP/2 preface) or that miss their deadline never reach a route: they are answered in
    // problem+json too (400, 408, 431), after any pipelined responses still owed, then closed.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => answerClientError(err, socket, config.http.requestTimeoutMs),
    ajv: { customOptions: { coerceTypes: false, removeAdditional: true, allErrors: false } },
    logger:
      opts.logger === false
        ? false
        : {
            level: config.logLevel,
            ...(opts.logStream ? { stream: opts.logStream } : {}),
            // Never log client addresses (DECISIONS.md "Telemetry privacy"): only method, path, id.
            serializers: {
              req: (req) => ({ method: req.method, url: req.url, id: req.id }),
              res: (res) => ({ statusCode: res.statusCode }),
            },
          },
    // Each request's child logger is made when it first logs (src/http/request-logger.ts).
    ...(opts.logger === false ? {} : { childLoggerFactory: lazyRequestLogger }),
    // Per-request lines only at debug: the hot paths should not pay for a log line each.
    logController: new LogController({ disableRequestLogging: config.logLevel !== 'debug' && config.logLevel !== 'trace' }),
  });

  for (const note of startupNotes) app.log.warn(note);
  trackRoutes(app);
  // Before any route is added: each route gets its own metrics hook (src/http/metrics.ts).
  metrics.install(app);
  // Every body we take is JSON (or a Connect/gRPC encoding the Connect plugin registers); plain
  // text gets 415 instead of reaching a handler as an unexpected string.
  app.removeContentTypeParser('text/plain');
  installProblemHandlers(app);
  installCors(app, {
    methods: [...new Set(['GET', 'HEAD', 'POST', 'OPTIONS', ...connectCors.allowedMethods])],
    // x402: v1 X-Payment; v2 PAYMENT-SIGNATURE. @x402/fetch also sends Access-Control-Expose-Headers
    // on its paid retry, so a browser pre-flight names it and must be allowed.
    allowedHeaders: [...connectCors.allowedHeaders, 'Authorization', 'X-Payment', 'PAYMENT-SIGNATURE', 'Access-Control-Expose-Headers', 'X-Request-Id', 'Mcp-Session-Id', 'Mcp-Protocol-Version', 'Mcp-Method', 'Mcp-Name', 'Last-Event-ID', 'A2A-Version', 'A2A-Extensions'],
    exposedHeaders: [
      ...connectCors.exposedHeaders,
      'X-Request-Id',
      'X-Interface-Version',
      'Retry-After',
      'WWW-Authenticate',
      'X-Payment-Required',
      'X-Payment-Wallet',
      'PAYMENT-REQUIRED',
      'PAYMENT-RESPONSE',
      'X-PAYMENT-RESPONSE',
      'RateLimit',
      'RateLimit-Policy',
      'Mcp-Session-Id',
    ],
    maxAgeSeconds: 7200,
  });
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id);
    reply.header('x-interface-version', INTERFACE_VERSION);
    if (health.draining) {
      // Shutting down: in-flight requests finish, new ones are told to go elsewhere.
      if (req.raw.httpVersionMajor === 1) reply.header('connection', 'close');
      sendProblemToCaller(req, reply, 'unavailable', 'the service is shutting down; retry on another instance', { 'retry-after': '1' });
      return;
    }
    done();
  });

  // After the request-id hook (a 429 carries it) and before any route handler runs.
  installRateLimits(app, services.limits);
  // After the rate limits (a limited client is told so first), before any body is read.
  metrics.watchBodyBudget(installBodyBudget(app, { limit: config.http.bodyBudgetBytes, defaultLimit: config.bodyLimit }));

  metrics.watchConnections(() => (app.server as DualProtocolServer).connectionStats());
  // A client network holding its share of unread answers is refused before it is handled (src/http/answer-budget.ts).
  installAnswerAdmission(app, (app.server as DualProtocolServer).answerBudget);
  metrics.watchAnswerBudget((app.server as DualProtocolServer).answerBudget);

  await app.register(connectPlugin, {
    routes: (router) => {
      connectRoutes(services)(router);
      // connect-es never decodes an OTLP export: the OTLP service does, within its bounds (src/http/otlp-grpc.ts).
      otlpExportsReadAsBytes(router, { readMaxBytes: services.otlp.maxExportBytes });
      // gRPC health checking and server reflection over what the router serves (docs/grpc.md).
      registerHealth(router, health);
      registerReflection(router);
      // Undecodable request messages are InvalidArgument, not Internal (src/http/connect-parse-errors.ts).
      parseErrorsAreInvalidArgument(router);
      // Refusals the Connect runtime answers with an empty body carry a Connect error (docs/grpc.md).
      refusalsCarryConnectErrors(router);
    },
    contextValues: connectContextValues,
    // The Connect twins of the limited REST routes, by method (src/http/rate-limit.ts); then the
    // buf.validate rules of the request message (src/http/contract-validation.ts).
    interceptors: [
      rateLimitInterceptor(services.limits),
      contractValidationInterceptor(),
      nativeHandlerErrors((err) => app.log.error({ err }, 'rpc failed')),
    ],
    // A request message larger than BODY_LIMIT is RESOURCE_EXHAUSTED (each message of a stream);
    // services with their own limit (OTLP) set it per service.
    readMaxBytes: config.bodyLimit,
  });
  registerRestRoutes(app, { services, db, config, now });

  let closing: Promise<void> | null = null;
  return {
    app,
    db,
    config,
    services,
    kek,
    health,
    fastPathAnswers: () => fast?.answered() ?? 0,
    async listen() {
      const address = await app.listen({ port: config.port, host: config.host });
      // The rollup aggregator runs wherever the service serves (docs/performance.md "Ingestion").
      services.startRollups();
      // Active observation runs wherever the service serves (OBSERVE_ENABLED, docs/observation.md).
      if (config.observe.enabled) services.observation.start();
      // The MCP Registry sync runs wherever the service serves, once per period across instances.
      if (config.registrySync.url !== null) services.registrySync.start();
      return address;
    },
    close() {
      closing ??= (async () => {
        // Health watchers see NOT_SERVING and their streams end, so that none holds the shutdown.
        health.drain();
        await app.close();
        await services.close();
        keyring.close();
        await db.close();
      })();
      return closing;
    },
  };
}
