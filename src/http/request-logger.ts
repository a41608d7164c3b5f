import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions } from 'pino';

// Every request gets its own logger (request.log, reply.log) carrying its request id. fastify
// makes it a pino child per request, whose construction serialises the bindings (JSON.stringify)
// and builds a logger object: a cost every request paid although request logging is off unless
// LOG_LEVEL is debug, and handlers log only on errors. Here the child is made on first use:
// a request that logs nothing costs one small object (issue 22: the per-request hooks).

class LazyRequestLogger {
  #child: FastifyBaseLogger | undefined;
  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly childBindings: Bindings,
    private readonly opts: ChildLoggerOptions,
  ) {}

  get #logger(): FastifyBaseLogger {
    return (this.#child ??= this.parent.child(this.childBindings, this.opts));
  }

  get level(): string {
    return this.#logger.level;
  }
  set level(level: string) {
    this.#logger.level = level;
  }
  // Prototype methods, not arrow-function fields: nothing is made per request but the object.
  fatal(...args: unknown[]): void {
    (this.#logger.fatal as (...a: unknown[]) => void)(...args);
  }
  error(...args: unknown[]): void {
    (this.#logger.error as (...a: unknown[]) => void)(...args);
  }
  warn(...args: unknown[]): void {
    (this.#logger.warn as (...a: unknown[]) => void)(...args);
  }
  info(...args: unknown[]): void {
    (this.#logger.info as (...a: unknown[]) => void)(...args);
  }
  debug(...args: unknown[]): void {
    (this.#logger.debug as (...a: unknown[]) => void)(...args);
  }
  trace(...args: unknown[]): void {
    (this.#logger.trace as (...a: unknown[]) => void)(...args);
  }
  silent(...args: unknown[]): void {
    (this.#logger.silent as (...a: unknown[]) => void)(...args);
  }
  child(bindings: Bindings, opts?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#logger.child(bindings, opts);
  }
  isLevelEnabled(level: string): boolean {
    return (this.#logger as unknown as { isLevelEnabled(l: string): boolean }).isLevelEnabled(level);
  }
  bindings(): Bindings {
    return (this.#logger as unknown as { bindings(): Bindings }).bindings();
  }
}

/** fastify's `childLoggerFactory`: the request's pino child, made when the request first logs. */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, opts: ChildLoggerOptions): FastifyBaseLogger {
  return new LazyRequestLogger(logger, bindings, opts) as unknown as FastifyBaseLogger;
}
