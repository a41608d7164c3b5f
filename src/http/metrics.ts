import type { FastifyInstance } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Db } from '../db/index.js';
import type { ConnectionStats } from './listener.js';

/**
 * Prometheus metrics, one registry per service instance (tests run several in one process).
 * Route labels are route patterns, never raw URLs, so cardinality stays bounded.
 */
export function createMetrics(db: Db) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: 'observatory_http_requests_total',
    help: 'HTTP requests by method, route pattern and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'observatory_http_request_duration_seconds',
    help: 'HTTP request latency by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const ingestBatch = new Histogram({
    name: 'observatory_ingest_batch_size',
    help: 'Telemetry reports written per database round trip',
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
    registers: [registry],
  });
  const receiptBatch = new Histogram({
    name: 'observatory_receipt_batch_size',
    help: 'Pre-flight receipts (with their demand rows) written per database transaction',
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500],
    registers: [registry],
  });
  const otlpItems = new Counter({
    name: 'observatory_otlp_items_total',
    help: 'Spans (signal="traces") and data points (signal="metrics") received over OTLP, by what became of them (docs/telemetry.md)',
    labelNames: ['signal', 'outcome'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'observatory_db_pool_connections',
    help: 'Database pool connections by state (postgres backend only)',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      const s = db.poolStats?.();
      if (!s) return;
      this.set({ state: 'total' }, s.total);
      this.set({ state: 'idle' }, s.idle);
      this.set({ state: 'waiting' }, s.waiting);
    },
  });
  return {
    registry,
    ingestBatch,
    receiptBatch,
    /** Labels are fixed words (signal, outcome), never anything an export carried. */
    otlpItems: (signal: string, outcome: string, n: number) => otlpItems.inc({ signal, outcome }, n),
    /** Open connections, the connection cap and refusals beyond it, read from the listener at each scrape. */
    watchConnections(stats: () => ConnectionStats) {
      new Gauge({
        name: 'observatory_http_connections',
        help: 'Client connections held now: all open, still choosing a protocol, HTTP/2 sessions; and the cap (MAX_CONNECTIONS or derived)',
        labelNames: ['state'] as const,
        registers: [registry],
        collect() {
          const s = stats();
          this.set({ state: 'open' }, s.open);
          this.set({ state: 'undecided' }, s.undecided);
          this.set({ state: 'h2_sessions' }, s.h2Sessions);
          if (s.cap) this.set({ state: 'cap' }, s.cap.served);
        },
      });
      const seen = { answered: 0, dropped: 0 };
      new Counter({
        name: 'observatory_http_connections_refused_total',
        help: 'New connections refused beyond the connection cap: answered 503 (HTTP/2: closed), or closed at accept',
        labelNames: ['how'] as const,
        registers: [registry],
        collect() {
          const { refused } = stats();
          for (const how of ['answered', 'dropped'] as const) {
            if (refused[how] > seen[how]) this.inc({ how }, refused[how] - seen[how]);
            seen[how] = refused[how];
          }
        },
      });
    },
    install(app: FastifyInstance) {
      // Label children are looked up once per (method, route[, status]) instead of hashing the
      // label set on every request; routes are patterns, so the maps stay small.
      const counters = new Map<string, { inc(): void }>();
      const timers = new Map<string, { observe(v: number): void }>();
      app.addHook('onResponse', (req, reply, done) => {
        const route = req.routeOptions.url ?? 'unmatched';
        const key = `${req.method} ${route}`;
        let timer = timers.get(key);
        if (!timer) timers.set(key, (timer = duration.labels({ method: req.method, route })));
        const status = reply.statusCode;
        const ckey = `${key} ${status}`;
        let counter = counters.get(ckey);
        if (!counter) counters.set(ckey, (counter = requests.labels({ method: req.method, route, status: String(status) })));
        counter.inc();
        timer.observe(reply.elapsedTime / 1000);
        done();
      });
      app.get('/metrics', async (_req, reply) => {
        reply.type(registry.contentType);
        return registry.metrics();
      });
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
