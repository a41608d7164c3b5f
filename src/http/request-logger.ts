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

  /** The pino child, made on first use. */
  get target(): FastifyBaseLogger {
    return (this.#child ??= this.parent.child(this.childBindings, this.opts));
  }

  get level(): string {
    return this.target.level;
  }
  set level(level: string) {
    this.target.level = level;
  }
  child(bindings: Bindings, opts?: ChildLoggerOptions): FastifyBaseLogger {
    return this.target.child(bindings, opts);
  }
  isLevelEnabled(level: string): boolean {
    return (this.target as unknown as { isLevelEnabled(l: string): boolean }).isLevelEnabled(level);
  }
  bindings(): Bindings {
    return (this.target as unknown as { bindings(): Bindings }).bindings();
  }
}

// The log methods, one function each on the prototype (nothing is made per request but the
// object), forwarding to the child.
for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const) {
  Object.defineProperty(LazyRequestLogger.prototype, level, {
    value(this: LazyRequestLogger, ...args: unknown[]): void {
      (this.target[level] as (...a: unknown[]) => void)(...args);
    },
    writable: true,
    configurable: true,
  });
}

/** fastify's `childLoggerFactory`: the request's pino child, made when the request first logs. */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, opts: ChildLoggerOptions): FastifyBaseLogger {
  return new LazyRequestLogger(logger, bindings, opts) as unknown as FastifyBaseLogger;
}
