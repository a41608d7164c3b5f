import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Db } from '../db/index.js';
import type { ConnectionStats } from './listener.js';
import type { BodyBudget } from './body-budget.js';
import type { AnswerBudget } from './answer-budget.js';
import { withRouteHook } from './route-hooks.js';

/**
 * Prometheus metrics, one registry per service instance (tests run several in one process).
 * Route labels are route patterns, never raw URLs, so cardinality stays bounded.
 */
export function createMetrics(db: Db) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // The per-request figures are counted in plain numbers by a hook of each route and handed to
  // the registry at scrape time (routeMetrics below): prom-client's labelled observe() validates
  // and hashes its label set on every call, a cost every request of every route paid (issue 22).
  const http = routeMetrics(registry);
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
    /** The request metrics entry of a route (method, route pattern): what the route's hook records into. */
    entry: (method: string, route: string) => http.entry(method, route),
    ingestBatch,
    receiptBatch,
    /** Labels are fixed words (signal, outcome), never anything an export carried. */
    otlpItems: (signal: string, outcome: string, n: number) => otlpItems.inc({ signal, outcome }, n),
    /** Open connections, the connection cap and refusals beyond it, read from the listener at each scrape. */
    watchConnections(stats: () => ConnectionStats) {
      new Gauge({
        name: 'observatory_http_connections',
        help: 'Client connections held now: all open, still choosing a protocol, HTTP/2 sessions; the cap (MAX_CONNECTIONS or derived) and the cap per client network (MAX_CONNECTIONS_PER_CLIENT or derived)',
        labelNames: ['state'] as const,
        registers: [registry],
        collect() {
          const s = stats();
          this.set({ state: 'open' }, s.open);
          this.set({ state: 'undecided' }, s.undecided);
          this.set({ state: 'h2_sessions' }, s.h2Sessions);
          if (s.cap) this.set({ state: 'cap' }, s.cap.served);
          if (s.perClient !== null) this.set({ state: 'per_client_cap' }, s.perClient);
        },
      });
      runningTotalCounter(registry, 'observatory_http_connections_refused_total', 'New connections refused beyond the connection cap: answered 503 (HTTP/2: closed), or closed at accept', 'how', () => stats().refused);
      runningTotalCounter(
        registry,
        'observatory_http_connections_refused_per_client_total',
        "New connections refused beyond their client network's limit: answered 429 (HTTP/2: closed), or closed at accept",
        'how',
        () => stats().refusedPerClient,
      );
    },
    /** The request body budget: bytes held now and the budget, and requests refused over it (src/http/body-budget.ts). */
    watchBodyBudget(budget: BodyBudget) {
      budgetGauge(
        registry,
        'observatory_http_request_body_bytes',
        'Request body bytes reserved by requests in flight (held), the process budget (HTTP_BODY_BUDGET_BYTES) and one client network share of it',
        budget,
      );
      runningTotalCounter(
        registry,
        'observatory_http_request_body_refused_total',
        'Requests refused before their body was read: over the process budget (503), or over their client network share (429)',
        'over',
        () => {
          const r = budget.refused();
          return { budget: r.total, per_client: r.perClient };
        },
      );
    },
    /** The answer budget: bytes of unread answers held now and the budget, and answers refused over it (src/http/answer-budget.ts). */
    watchAnswerBudget(budget: AnswerBudget) {
      budgetGauge(
        registry,
        'observatory_http_answer_bytes',
        'Bytes of answers (writes of 4 KiB or more) held until their clients read them (held), the process budget (HTTP_ANSWER_BUDGET_BYTES) and one client network share of it',
        budget,
      );
      runningTotalCounter(
        registry,
        'observatory_http_answers_refused_total',
        "Answers not sent over the process budget (stream reset or connection closed) or over their client network share, and requests refused 429 because their network held its share",
        'over',
        () => {
          const r = budget.refused();
          return { budget: r.total, per_client: r.perClient, admission: r.admission };
        },
      );
    },
    install(app: FastifyInstance) {
      // Each route records into its own entry, found once when the route is added; requests that
      // match no route (404, 405, unknown RPC methods) record under route="unmatched".
      app.addHook('onRoute', (opts) => {
        const methods = Array.isArray(opts.method) ? opts.method : [opts.method];
        const entries = new Map(methods.map((m) => [m, http.entry(m, opts.url ?? opts.path)]));
        const hook = (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
          (entries.get(req.method) ?? http.entry(req.method, opts.url ?? opts.path)).record(reply.statusCode, reply.elapsedTime / 1000);
          done();
        };
        opts.onResponse = withRouteHook(opts.onResponse, hook);
      });
      app.addHook('onResponse', (req, reply, done) => {
        if (req.is404) http.entry(req.method, 'unmatched').record(reply.statusCode, reply.elapsedTime / 1000);
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

/** A counter that follows running totals kept elsewhere (one per value of `label`), read at each scrape. */
/** A bytes budget's gauge (the request body budget, the answer budget): bytes held now, the process budget, one client network's share. */
function budgetGauge(registry: Registry, name: string, help: string, budget: { held(): { total: number }; readonly limit: number; readonly perClient: number }) {
  new Gauge({
    name,
    help,
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      this.set({ state: 'held' }, budget.held().total);
      this.set({ state: 'budget' }, budget.limit);
      this.set({ state: 'per_client' }, budget.perClient);
    },
  });
}

function runningTotalCounter(registry: Registry, name: string, help: string, label: string, totals: () => Record<string, number>) {
  const seen = new Map<string, number>();
  new Counter({
    name,
    help,
    labelNames: [label],
    registers: [registry],
    collect() {
      for (const [value, now] of Object.entries(totals())) {
        const before = seen.get(value) ?? 0;
        if (now > before) this.inc({ [label]: value }, now - before);
        seen.set(value, now);
      }
    },
  });
}

const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

interface RouteEntry {
  readonly method: string;
  readonly route: string;
  /** Requests by status code. */
  readonly statuses: Map<number, number>;
  /** Requests per duration bucket (not cumulative); the last one is +Inf. */
  readonly buckets: Float64Array;
  sum: number;
  count: number;
  record(status: number, seconds: number): void;
}

type MetricValue = { labels: Record<string, string | number>; value: number; metricName?: string };

/**
 * `observatory_http_requests_total` (method, route, status) and
 * `observatory_http_request_duration_seconds` (method, route), kept as plain numbers per
 * (method, route) entry and exposed to the registry as two metrics in prom-client's own shape
 * (`get()`, as its Counter and Histogram return it), so the exposition and JSON formats are
 * prom-client's. Route labels are route patterns, never raw URLs, so the entries stay few.
 */
export function routeMetrics(registry: Registry) {
  const entries = new Map<string, RouteEntry>();
  const bounds = DURATION_BUCKETS;
  function entry(method: string, route: string): RouteEntry {
    const key = `${method} ${route}`;
    let e = entries.get(key);
    if (e === undefined) {
      const created: RouteEntry = {
        method,
        route,
        statuses: new Map(),
        buckets: new Float64Array(bounds.length + 1),
        sum: 0,
        count: 0,
        record(status, seconds) {
          created.statuses.set(status, (created.statuses.get(status) ?? 0) + 1);
          let i = 0;
          while (i < bounds.length && seconds > bounds[i]!) i++;
          created.buckets[i]!++;
          created.sum += seconds;
          created.count++;
        },
      };
      entries.set(key, (e = created));
    }
    return e;
  }
  const metric = (name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValue[]) => ({
    name,
    help,
    type,
    aggregator: 'sum' as const,
    get: async () => ({ name, help, type, values: values(), aggregator: 'sum' as const }),
    // Zeroed in place: each route's hook holds its entries.
    reset() {
      for (const e of entries.values()) {
        e.statuses.clear();
        e.buckets.fill(0);
        e.sum = 0;
        e.count = 0;
      }
    },
  });
  registry.registerMetric(
    metric('observatory_http_requests_total', 'HTTP requests by method, route pattern and status code', 'counter', () => {
      const out: MetricValue[] = [];
      for (const e of entries.values()) for (const [status, n] of e.statuses) out.push({ labels: { method: e.method, route: e.route, status: String(status) }, value: n });
      return out;
    }) as never,
  );
  const name = 'observatory_http_request_duration_seconds';
  registry.registerMetric(
    metric(name, 'HTTP request latency by method and route pattern', 'histogram', () => {
      const out: MetricValue[] = [];
      for (const e of entries.values()) {
        if (e.count === 0) continue;
        let acc = 0;
        bounds.forEach((le, i) => {
          acc += e.buckets[i]!;
          out.push({ labels: { le, method: e.method, route: e.route }, value: acc, metricName: `${name}_bucket` });
        });
        out.push({ labels: { le: '+Inf', method: e.method, route: e.route }, value: e.count, metricName: `${name}_bucket` });
        out.push({ labels: { method: e.method, route: e.route }, value: e.sum, metricName: `${name}_sum` });
        out.push({ labels: { method: e.method, route: e.route }, value: e.count, metricName: `${name}_count` });
      }
      return out;
    }) as never,
  );
  return { entry };
}
