// Active observation (docs/observation.md): the observatory probes catalogue servers, and servers
// with evidence from OBSERVE_MIN_SOURCES independent source families, itself (never a server one
// reporter invented), on a schedule, with the official MCP SDK client (v2: server/discover or
// initialize, then tools/list; the MCP probe service, which also checks the Server Card) through
// the safe outbound client. Each probe becomes telemetry from the observatory's own source (weighted
// below any agent, src/domain/scoring.ts) and refreshes the server's drift baseline, so servers
// nobody reports on get a score, and manifest changes are flagged without anyone asking.
//
// Several instances on one PostgreSQL share the work: each round claims due servers with
// FOR UPDATE SKIP LOCKED and moves them one interval ahead (store/observation.ts), so each server
// is probed once per interval, within one global per-minute budget.
import { setMaxListeners } from 'node:events';
import { McpHttpStatus } from '../probes/mcp-manifest.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from '../probes/safe-fetch.js';
import { observationStore, type ClaimedServer, type ProbeOutcomeKind } from '../store/observation.js';
import type { ServiceDeps } from './context.js';
import type { DriftService } from './drift.js';
import { INSTANCE_ID } from './jobs.js';
import { CARD_REFRESH_MS, createMcpProbeService, type McpProbeService } from './mcp-probe.js';
import type { TelemetryService } from './telemetry.js';

/** An unchanged manifest is re-baselined (a fresh signed receipt) at most this often. */
export const BASELINE_REFRESH_MS = 24 * 3600_000;
/** The loop looks for due servers this often (or every interval, when that is shorter). */
export const OBSERVE_TICK_MS = 5_000;
/** Who may be observed is re-checked at most this often (it reads every server's recent evidence). */
export const SCHEDULE_SYNC_MS = 60_000;
/** Evidence this recent counts towards OBSERVE_MIN_SOURCES. */
export const OBSERVE_EVIDENCE_WINDOW_MS = 7 * 86_400_000;

export interface ProbeResult {
  serverId: number;
  url: string;
  name: string;
  outcome: ProbeOutcomeKind;
  latencyMs: number;
  httpStatus: number | null;
  toolCount: number | null;
  driftDetected: boolean;
  /** Recorded as telemetry (refused, unresolved and auth_required probes are not: they say nothing reliable about the server's health). */
  recorded: boolean;
  detail: string | null;
}

export interface RoundSummary {
  startedAt: Date;
  finishedAt: Date;
  probed: number;
  outcomes: Record<ProbeOutcomeKind, number>;
  driftDetected: number;
  /** The global per-minute budget ran out before every due server was probed. */
  budgetExhausted: boolean;
  results: ProbeResult[];
}

export function createObservationService(
  deps: ServiceDeps,
  services: { telemetry: Pick<TelemetryService, 'recordObservation'>; drift: Pick<DriftService, 'recordBaseline'>; mcpProbe?: Pick<McpProbeService, 'probe'> },
  opts: { instance?: string; fetcher?: SafeFetcher; onError?: (err: unknown) => void } = {},
) {
  const { db, config, now } = deps;
  const cfg = config.observe;
  const mcpProbe = services.mcpProbe ?? createMcpProbeService(deps, { fetcher: opts.fetcher });
  const instance = opts.instance ?? INSTANCE_ID;
  const store = observationStore(db);
  const intervalMs = cfg.intervalSeconds * 1000;

  let timer: NodeJS.Timeout | null = null;
  let running: Promise<RoundSummary | null> | null = null;
  let stopping = false;
  const stopController = new AbortController();
  // Every probe in flight listens on this one signal (OBSERVE_CONCURRENCY of them, and a few
  // listeners each): not a leak, so no MaxListenersExceededWarning past Node's default of 10.
  setMaxListeners(0, stopController.signal);

  /** One probe of one claimed server, recorded as telemetry and as a drift baseline. */
  async function probe(server: ClaimedServer): Promise<ProbeResult> {
    // The catalogue's transport when it knows one; otherwise the probe finds out (Streamable HTTP, then SSE).
    const transport = server.transport === 'sse' ? ('sse' as const) : undefined;
    const started = performance.now();
    const base = { serverId: server.id, url: server.url, name: server.name, toolCount: null, driftDetected: false };
    let result: ProbeResult;
    try {
      const { manifest } = await mcpProbe.probe(server, {
        transport,
        timeoutMs: cfg.timeoutMs,
        signal: stopController.signal,
        cardMaxAgeMs: CARD_REFRESH_MS,
      });
      const latencyMs = performance.now() - started;
      result = { ...base, outcome: 'ok', latencyMs, httpStatus: 200, toolCount: manifest.tools.length, recorded: true, detail: null };
      await services.telemetry.recordObservation({ serverId: server.id, serverUrl: server.url, success: true, latencyMs, httpStatus: 200 });
      const b = await services.drift.recordBaseline(server, manifest, { refreshAfterMs: BASELINE_REFRESH_MS });
      result.driftDetected = b.driftDetected;
    } catch (err) {
      const latencyMs = performance.now() - started;
      if (stopController.signal.aborted) throw err; // shutting down: not the server's fault, not recorded
      if (err instanceof TargetRefused) {
        result = { ...base, outcome: 'refused', latencyMs, httpStatus: null, recorded: false, detail: err.reason };
      } else if (err instanceof ProbeFailed && err.kind === 'dns') {
        // Not scored: a name that does not resolve is as often the observer's resolver (an outage
        // would fail every server at once) or a placeholder entry as a fault of the server.
        result = { ...base, outcome: 'unresolved', latencyMs, httpStatus: null, recorded: false, detail: err.message };
      } else if (err instanceof McpHttpStatus && (err.status === 401 || err.status === 403)) {
        result = { ...base, outcome: 'auth_required', latencyMs, httpStatus: err.status, recorded: false, detail: err.message };
      } else {
        const timeout = err instanceof ProbeFailed && err.kind === 'timeout';
        const httpStatus = err instanceof McpHttpStatus ? err.status : null;
        result = { ...base, outcome: timeout ? 'timeout' : 'failed', latencyMs, httpStatus, recorded: true, detail: (err as Error)?.message ?? String(err) };
        await services.telemetry.recordObservation({ serverId: server.id, serverUrl: server.url, success: false, latencyMs, httpStatus });
      }
    }
    await store.recordProbe(server.id, { at: now(), outcome: result.outcome, detail: result.detail, latencyMs: Math.round(result.latencyMs * 10) / 10 });
    return result;
  }

  let lastSync: number | null = null;
  /**
   * Who is observed (docs/observation.md "What is observed"): catalogue servers, and servers with
   * evidence from OBSERVE_MIN_SOURCES independent source families in the last 7 days; a server a
   * single reporter invented is never probed. Re-checked at most once a minute.
   */
  async function syncSchedule(at: Date): Promise<void> {
    if (lastSync !== null && at.getTime() - lastSync < SCHEDULE_SYNC_MS && at.getTime() >= lastSync) return;
    await store.syncSchedule(at, { minSources: cfg.minSources, since: new Date(at.getTime() - OBSERVE_EVIDENCE_WINDOW_MS) });
    lastSync = at.getTime();
  }

  /**
   * One round: brings the schedule in line with who may be observed, then OBSERVE_CONCURRENCY
   * workers claim due servers one at a time and probe them until none is due or the budget is spent.
   */
  async function runRound(): Promise<RoundSummary> {
    const startedAt = now();
    await syncSchedule(startedAt);
    const results: ProbeResult[] = [];
    let budgetExhausted = false;
    const worker = async () => {
      while (!stopping) {
        const { claimed, budgetLeft } = await db.transaction((tx) =>
          observationStore(tx).claimDue({ at: now(), intervalMs, instance, max: 1, ratePerMinute: cfg.ratePerMinute }),
        );
        if (claimed.length === 0) {
          if (budgetLeft <= 0) budgetExhausted = true;
          return;
        }
        for (const server of claimed) {
          try {
            results.push(await probe(server));
          } catch (err) {
            if (stopping) return;
            opts.onError?.(err);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: cfg.concurrency }, worker));
    const outcomes: Record<ProbeOutcomeKind, number> = { ok: 0, failed: 0, timeout: 0, auth_required: 0, unresolved: 0, refused: 0 };
    for (const r of results) outcomes[r.outcome]++;
    results.sort((a, b) => a.serverId - b.serverId);
    return { startedAt, finishedAt: now(), probed: results.length, outcomes, driftDetected: results.filter((r) => r.driftDetected).length, budgetExhausted, results };
  }

  let onRound: ((s: RoundSummary) => void) | undefined;
  function tick(): void {
    if (running || stopping) return;
    running = runRound()
      .then((s) => {
        onRound?.(s);
        return s;
      })
      .catch((err: unknown) => {
        if (!stopping) opts.onError?.(err);
        return null;
      })
      .finally(() => {
        running = null;
      });
  }

  return {
    runRound,

    /** Starts the loop (serve / observe): a round now, then one every tick. Idempotent. */
    start(opts: { onRound?: (s: RoundSummary) => void } = {}): void {
      if (timer || stopping) return;
      onRound = opts.onRound;
      timer = setInterval(tick, Math.min(OBSERVE_TICK_MS, intervalMs));
      timer.unref();
      tick();
    },

    get running(): boolean {
      return timer !== null;
    },

    /** Stops the loop: no new claims, probes in flight are aborted (not recorded), waits for the round to end. */
    async stop(): Promise<void> {
      stopping = true;
      if (timer) clearInterval(timer);
      timer = null;
      stopController.abort();
      await running;
    },

    /** The schedule of the given servers (all when omitted). */
    schedule(serverIds?: readonly number[]) {
      return store.rows(serverIds ?? null);
    },
  };
}

export type ObservationService = ReturnType<typeof createObservationService>;
