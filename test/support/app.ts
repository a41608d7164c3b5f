import type { Interceptor } from '@connectrpc/connect';
import { loadConfig, type Config } from '../../src/config.js';
import { createObservatory, type Observatory } from '../../src/server.js';
import { createTestDatabase, type TestDatabase } from './db.js';
import { TEST_KEK_TEXT } from './keys.js';

export interface TestApp {
  obs: Observatory;
  base: string;
  config: Config;
  tdb: TestDatabase;
  close(): Promise<void>;
}

/** Starts the whole service on a free loopback port over a fresh database of the current backend. */
export async function startTestApp(env: Record<string, string> = {}, opts: { now?: () => Date; tdb?: TestDatabase; logStream?: { write(line: string): void } } = {}): Promise<TestApp> {
  const tdb = opts.tdb ?? (await createTestDatabase());
  // Active observation is off unless a test turns it on: tests drive rounds with fixed clocks.
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OBSERVE_ENABLED: '0', KEY_ENCRYPTION_KEY: TEST_KEK_TEXT, ...env });
  const obs = await createObservatory(config, { db: tdb.db, logger: opts.logStream ? true : false, logStream: opts.logStream, now: opts.now });
  const address = await obs.listen();
  const port = new URL(address).port;
  const base = `http://127.0.0.1:${port}`;
  return {
    obs,
    base,
    config,
    tdb,
    async close() {
      await obs.close();
      if (!opts.tdb) await tdb.drop().catch(() => {});
    },
  };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

/** Asserts the RFC 9457 shape every REST error must have and returns the body. */
export async function expectProblem(res: Response, status: number, code?: string): Promise<Record<string, unknown>> {
  const text = await res.text();
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${text}`);
  const ct = res.headers.get('content-type') ?? '';
  if (!ct.startsWith('application/problem+json')) throw new Error(`expected problem+json, got ${ct}: ${text}`);
  const body = JSON.parse(text) as Record<string, unknown>;
  for (const k of ['type', 'title', 'status', 'detail', 'code']) if (!(k in body)) throw new Error(`problem body lacks ${k}: ${text}`);
  if (body.status !== status) throw new Error(`problem status ${String(body.status)} != ${status}`);
  if (code !== undefined && body.code !== code) throw new Error(`expected code ${code}, got ${String(body.code)}`);
  return body;
}

/** Response body as JSON, typed loosely for assertions. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function json<T = any>(res: Response | Promise<Response>): Promise<T> {
  return (await (await res).json()) as T;
}

/** A Connect interceptor that sends `X-Forwarded-For: <ip>` (apps started with TRUST_PROXY take it as the client's address). */
export const forwardedFor =
  (ip: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set('x-forwarded-for', ip);
    return next(req);
  };
