import { describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { Writable } from 'node:stream';
import { installProblemHandlers } from '../src/http/problem.js';
import { ObservatoryError } from '../src/errors.js';

// A database outage fails every request that needs it at once. Logged one error line per
// request, an outage buried the log (the audit counted 3,182 lines in 30 s): such failures are one
// warning a second, counting the ones not logged; other failures are still logged one by one.

function appWithLog() {
  const lines: { level: number; msg: string; unlogged_since_last?: number }[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l));
      done();
    },
  });
  const app = Fastify({ logger: { level: 'info', stream } });
  installProblemHandlers(app);
  app.get('/db', async () => {
    throw Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' });
  });
  // The service's own refusal when a write queue waited its bound, or a client left before its write.
  app.get('/queue', async () => {
    throw new ObservatoryError('unavailable', 'the request was abandoned before its report was written; nothing was stored', { headers: { 'retry-after': '2' } });
  });
  app.get('/bug', async () => {
    throw new Error('a bug');
  });
  return { app, lines };
}

describe('failure logging', () => {
  it('a database outage is one warning a second, not a line per request; other failures stay one per request', async () => {
    const { app, lines } = appWithLog();
    const started = Date.now();
    for (let i = 0; i < 300; i++) {
      const r = await app.inject({ url: '/db' });
      expect(r.statusCode).toBe(503);
      expect(r.headers['retry-after']).toBe('2');
    }
    const outage = lines.filter((l) => l.msg === 'database unavailable: answered 503');
    expect(outage.length).toBeGreaterThanOrEqual(1);
    // At most one a second (however slow this machine ran the 300), and the first says what it is.
    expect(outage.length).toBeLessThanOrEqual(Math.floor((Date.now() - started) / 1000) + 1);
    expect(outage[0]!.unlogged_since_last).toBe(0);
    if (outage.length > 1) expect(outage[1]!.unlogged_since_last).toBeGreaterThan(0);
    expect(outage.every((l) => l.level === 40)).toBe(true);
    expect(lines.filter((l) => l.msg === 'request failed')).toEqual([]);
    for (let i = 0; i < 5; i++) expect((await app.inject({ url: '/bug' })).statusCode).toBe(500);
    expect(lines.filter((l) => l.msg === 'request failed' && l.level === 50)).toHaveLength(5);
    await app.close();
  });

  it("the service's own unavailable refusals (a queue past its bound, requests abandoned before their write) are throttled the same way", async () => {
    const { app, lines } = appWithLog();
    // The throttle is per process: past the test above's last warning, the first of these is logged.
    await new Promise((r) => setTimeout(r, 1100));
    const started = Date.now();
    for (let i = 0; i < 300; i++) expect((await app.inject({ url: '/queue' })).statusCode).toBe(503);
    const warned = lines.filter((l) => l.msg === 'database unavailable: answered 503');
    expect(warned.length).toBeGreaterThanOrEqual(1);
    expect(warned.length).toBeLessThanOrEqual(Math.floor((Date.now() - started) / 1000) + 1);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    await app.close();
  });
});
