// The demo data set behind `npm run demo` (and the page tests, with fewer servers and days):
// realistic telemetry for MCP servers that are healthy, flaky, slow, degrading, brand-new or in an incident.
// Reports go through the ingestion store (telemetryStore.insertMany), so every rollup, the score
// history and the baselines are filled exactly as live traffic would fill them. Deterministic
// (seeded random numbers) for the same options and `now`.
import type { Queryable } from '../db/index.js';
import { classifyCategory } from '../domain/category.js';
import { serverNameFromUrl, slugify } from '../domain/server-identity.js';
import { createTrustEngine } from '../services/trust-engine.js';
import { serverStore, type ServerRow } from '../store/servers.js';
import { telemetryStore, type IngestRow } from '../store/telemetry.js';

/** Canonical URLs of demo servers all look like this (how `npm run demo` recognises a loaded set). */
export const DEMO_URL_LIKE = 'https://%.demo.example/mcp';

type Profile = 'healthy' | 'flaky' | 'slow' | 'degrading' | 'new' | 'incident';
const HOUR = 3_600_000;
export const DEMO_DAYS = 30;

export const DEMO_SERVERS: [host: string, tool: string, profile: Profile][] = [
  ['weather-now', 'get_forecast', 'healthy'], ['open-meteo-bridge', 'current_temperature', 'healthy'], ['stormwatch', 'weather_alerts', 'flaky'],
  ['ledger-pay', 'create_invoice', 'healthy'], ['stock-quotes', 'get_price', 'slow'], ['crypto-ticker', 'exchange_rate', 'degrading'],
  ['brave-search-proxy', 'web_search', 'healthy'], ['deep-crawl', 'scrape_page', 'incident'], ['serp-lite', 'search', 'flaky'],
  ['slack-relay', 'post_message', 'healthy'], ['mail-agent', 'send_email', 'degrading'], ['sms-gateway', 'send_sms', 'new'],
  ['github-tools', 'create_issue', 'healthy'], ['ci-runner', 'deploy', 'flaky'], ['lint-service', 'lint_code', 'new'],
  ['postgres-query', 'run_sql', 'healthy'], ['warehouse-bi', 'bigquery_job', 'slow'], ['vector-store', 'vector_search', 'healthy'],
  ['notion-sync', 'create_page', 'healthy'], ['calendar-hub', 'calendar_events', 'degrading'], ['jira-bridge', 'create_task', 'flaky'],
  ['maps-router', 'route_plan', 'healthy'], ['flight-status', 'flight_lookup', 'slow'], ['video-notes', 'youtube_transcript', 'healthy'],
  ['arxiv-reader', 'paper_search', 'healthy'], ['cve-scanner', 'vuln_scan', 'flaky'], ['fhir-gateway', 'patient_lookup', 'new'],
  ['audit-trail', 'compliance_report', 'healthy'], ['utility-box', 'echo', 'degrading'], ['kyc-check', 'kyc_verify', 'healthy'],
];

function mulberry32(seed: number) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Plan {
  url: string;
  tool: string;
  profile: Profile;
  perHour: number;
  baseLatency: number;
  sources: number;
  startDay: number;
}

/**
 * Success probability, latency multiplier and volume multiplier of a profile on day d (0 = 30
 * days ago), `ageHours` before the end of the data set.
 */
function behaviour(p: Profile, day: number, hour: number, days: number, ageHours: number): { success: number; latency: number; volume?: number } {
  switch (p) {
    case 'incident':
      // Healthy for weeks, then an incident in the last 3 hours: slow, failing answers and the
      // clients' retries (the anomaly detector's latency and error-rate spikes, live on /monitor).
      return ageHours < 3 ? { success: 0.45, latency: 7, volume: 3 } : { success: 0.985, latency: 1 };
    case 'healthy':
      return { success: 0.985, latency: 1 };
    case 'flaky':
      // Bad hours now and then: a 2-hour outage roughly every third day.
      return { success: (day * 24 + hour) % 71 < 2 ? 0.35 : 0.88, latency: 1.3 };
    case 'slow':
      return { success: 0.96, latency: 6 };
    case 'degrading': {
      const k = Math.max(0, day - (days - 8)) / 8; // healthy until the last 8 days, then sliding
      return { success: 0.98 - 0.45 * k, latency: 1 + 4 * k };
    }
    case 'new':
      return { success: 0.95, latency: 1.1 };
  }
}

export interface DemoOptions {
  /** How many of DEMO_SERVERS to load (default all 30). */
  servers?: number;
  /** Days of history ending at `now` (default 30). */
  days?: number;
  now?: Date;
  seed?: number;
  /** Progress callback after each simulated day. */
  onDay?: (day: number, days: number, reports: number) => void;
}

/** Loads the demo data set into `db`; returns how many servers and reports were written. */
export async function loadDemoData(db: Queryable, opts: DemoOptions = {}): Promise<{ servers: number; reports: number }> {
  const days = opts.days ?? DEMO_DAYS;
  const now = opts.now ?? new Date();
  const rand = mulberry32(opts.seed ?? 42);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  const servers = serverStore(db);
  const telemetry = telemetryStore(db);
  const engine = createTrustEngine(db);
  const start = Math.floor((now.getTime() - days * 24 * HOUR) / HOUR) * HOUR;
  const plans: Plan[] = DEMO_SERVERS.slice(0, opts.servers ?? DEMO_SERVERS.length).map(([host, tool, profile]) => ({
    url: `https://${host}.demo.example/mcp`,
    tool,
    profile,
    perHour: 2 + Math.floor(rand() * 10),
    baseLatency: 60 + Math.floor(rand() * 400),
    sources: 1 + Math.floor(rand() * 6),
    startDay: profile === 'new' ? days - 1 - Math.floor(rand() * 2) : Math.floor(rand() * 3),
  }));
  const rows = new Map<string, ServerRow>();
  let reports = 0;
  for (let day = 0; day < days; day++) {
    const batch: IngestRow[] = [];
    for (const p of plans) {
      if (day < p.startDay) continue;
      for (let hour = 0; hour < 24; hour++) {
        const t0 = start + (day * 24 + hour) * HOUR;
        if (t0 > now.getTime()) break;
        let server = rows.get(p.url);
        if (!server) {
          const name = serverNameFromUrl(p.url);
          server = await servers.ensure({ url: p.url, name, slug: slugify(name), category: classifyCategory([name, p.tool]) }, new Date(t0));
          rows.set(p.url, server);
        }
        const b = behaviour(p.profile, day, hour, days, (now.getTime() - t0) / HOUR);
        // Daily rhythm: busier in the (UTC) afternoon.
        const volume = Math.max(0, Math.round(p.perHour * (b.volume ?? 1) * (0.6 + 0.8 * Math.sin(((hour - 6) / 24) * Math.PI) ** 2) + gauss()));
        for (let i = 0; i < volume; i++) {
          const ok = rand() < b.success;
          const latency = Math.max(1, Math.round(p.baseLatency * b.latency * Math.exp(0.35 * gauss())));
          batch.push({
            serverId: server.id,
            at: new Date(t0 + Math.floor(rand() * HOUR)),
            source: `demo:${slugify(p.url)}:${Math.floor(rand() * p.sources)}`,
            report: { server_url: p.url, success: ok, latency_ms: latency, tool_name: p.tool, http_status: ok ? 200 : rand() < 0.6 ? 503 : 500 },
          });
        }
      }
    }
    batch.sort((a, b) => a.at.getTime() - b.at.getTime());
    for (let i = 0; i < batch.length; i += 5000) await telemetry.insertMany(batch.slice(i, i + 5000));
    reports += batch.length;
    // End-of-day scores become the score history (deltas and trends).
    const at = new Date(Math.min(now.getTime(), start + (day + 1) * 24 * HOUR - 1));
    if (rows.size > 0) await engine.compute([...rows.values()], at);
    opts.onDay?.(day + 1, days, reports);
  }
  await engine.compute([...rows.values()], now);
  return { servers: rows.size, reports };
}
