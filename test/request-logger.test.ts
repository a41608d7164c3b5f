import { describe, expect, it } from 'vitest';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions } from 'pino';
import { lazyRequestLogger } from '../src/http/request-logger.js';

// Each request's logger is a pino child made on first use (src/http/request-logger.ts).
describe('request logger', () => {
  it('makes the child only when the request first logs, with its bindings, level and children', () => {
    const lines: string[] = [];
    // fastify's own pino, as the service configures it.
    const root = Fastify({ logger: { level: 'info', stream: { write: (l: string) => void lines.push(l) } } }).log;
    let made = 0;
    const counting = Object.assign(Object.create(root) as FastifyBaseLogger, {
      child: (b: Bindings, o?: ChildLoggerOptions) => {
        made++;
        return root.child(b, o);
      },
    });
    const log = lazyRequestLogger(counting, { reqId: 'r-1' }, {});
    expect(made).toBe(0);
    log.debug('below the level');
    expect(made).toBe(1);
    expect(lines).toEqual([]);
    log.info({ a: 1 }, 'hello %s', 'there');
    log.error(new Error('boom'));
    expect(made).toBe(1);
    const [info, error] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(info).toMatchObject({ reqId: 'r-1', a: 1, msg: 'hello there', level: 30 });
    expect(error).toMatchObject({ reqId: 'r-1', level: 50, err: { message: 'boom' } });
    expect(log.level).toBe('info');
    log.level = 'debug';
    log.debug('now shown');
    expect(JSON.parse(lines[2]!)).toMatchObject({ reqId: 'r-1', msg: 'now shown' });
    log.child({ step: 'x' }).warn('nested');
    expect(JSON.parse(lines[3]!)).toMatchObject({ reqId: 'r-1', step: 'x', msg: 'nested' });
    // A route's own level (fastify passes it as the child's options).
    const quiet = lazyRequestLogger(root, { reqId: 'r-2' }, { level: 'error' });
    quiet.info('dropped');
    expect(lines.length).toBe(4);
    const enabled = (l: string) => (quiet as unknown as { isLevelEnabled(l: string): boolean }).isLevelEnabled(l);
    expect(enabled('error')).toBe(true);
    expect(enabled('info')).toBe(false);
  });
});
