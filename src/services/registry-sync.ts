// The standing MCP Registry sync (docs/observation.md "Registry sync"): every
// REGISTRY_SYNC_INTERVAL_SECONDS, one instance (periodicJob: advisory lock + job_runs) imports
// what changed in the registry at REGISTRY_SYNC_URL since the last complete sync (the registry's
// `updated_since`, from the greatest entry updatedAt seen so far; the first sync reads the whole
// list). New and updated remotes are tracked, deprecated ones marked, deleted ones marked and no
// longer probed. A failed or incomplete run keeps the mark, so the next run asks again.
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { RegistryListingSchema } from '../../gen/observatory/v1/trust_pb.js';
import type { Config } from '../config.js';
import { compareTimestamps } from '../domain/catalogue.js';
import { registrySyncStore, type RegistryListingRow, type SyncState } from '../store/registry-sync.js';
import type { CatalogueService, ImportSummary } from './catalogue.js';
import type { ServiceDeps } from './context.js';
import { periodicJob, type PeriodicJob } from './jobs.js';

export interface SyncRun {
  source: string;
  /** The updated_since this run asked for; null for a full read. */
  updatedSince: string | null;
  summary: ImportSummary;
  /** The mark the next run asks from. */
  highWater: string | null;
}

export function createRegistrySync(
  deps: Pick<ServiceDeps, 'db' | 'now'> & { config: Pick<Config, 'registrySync'> },
  catalogue: Pick<CatalogueService, 'importUrl'>,
  opts: { onError?: (err: unknown) => void } = {},
) {
  const { db, now, config } = deps;
  const store = registrySyncStore(db);
  const source = config.registrySync.url;
  let job: PeriodicJob | null = null;
  let startup: Promise<unknown> | null = null;

  /** One sync as of `at`: reads the registry from the stored mark and moves the mark on. */
  async function run(at: Date = now()): Promise<SyncRun> {
    if (source === null) throw new Error('REGISTRY_SYNC_URL is not set');
    const state = await store.state(source);
    const updatedSince = state?.high_water ?? null;
    try {
      const summary = await catalogue.importUrl(source, { updatedSince });
      // Only a complete read moves the mark: entries after a cut-off page were never seen.
      const complete = summary.stoppedEarly === null;
      const seen = summary.latestUpdate;
      const highWater = complete && seen !== null && (updatedSince === null || compareTimestamps(seen, updatedSince) > 0) ? seen : null;
      await store.recordRun(source, {
        at,
        ok: complete,
        highWater,
        error: complete ? null : summary.stoppedEarly,
        summary: {
          updated_since: updatedSince,
          pages: summary.pages,
          entries: summary.entries,
          added: summary.added,
          updated: summary.updated,
          deprecated: summary.deprecated,
          withdrawn_entries: summary.withdrawn.entries,
          withdrawn_servers: summary.withdrawn.servers,
          skipped: summary.skippedCount,
        },
      });
      return { source, updatedSince, summary, highWater: highWater ?? updatedSince };
    } catch (err) {
      await store.recordRun(source, { at, ok: false, highWater: null, error: (err as Error).message.slice(0, 500), summary: null }).catch(() => {});
      throw err;
    }
  }

  const report = (err: unknown) => {
    try {
      opts.onError?.(err);
    } catch {
      // a failing logger must not turn a failed run into an unhandled rejection
    }
  };

  return {
    run,
    /** Where the sync stands (null before its first run or without REGISTRY_SYNC_URL). */
    state(): Promise<SyncState | null> {
      return source === null ? Promise.resolve(null) : store.state(source);
    },
    /**
     * Starts the periodic sync (serve does, when REGISTRY_SYNC_URL is set): a run now, unless
     * another instance already ran this period, then once per period across all instances.
     */
    start(): PeriodicJob | null {
      if (source === null || job) return job;
      job = periodicJob(db, 'registry-sync', config.registrySync.intervalSeconds * 1000, now, run, { onError: report });
      startup = job.tick(now()).catch(report);
      return job;
    },
    /** Resolves when the start-up run has finished (whatever its outcome). */
    async ready(): Promise<void> {
      await startup;
    },
    async close(): Promise<void> {
      job?.stop();
      job = null;
      await startup;
      startup = null;
    },
  };
}

export type RegistrySync = ReturnType<typeof createRegistrySync>;

/** A server's registry listing as the trust record and pre-flight carry it (`registry`). */
export function listingMessage(row: RegistryListingRow | null): MessageInitShape<typeof RegistryListingSchema> | undefined {
  if (!row) return undefined;
  return {
    name: row.registry_name,
    status: row.registry_status,
    statusMessage: row.registry_status_message ?? undefined,
    statusChangedAt: row.registry_status_changed_at?.toISOString(),
    updatedAt: row.registry_updated_at?.toISOString(),
  };
}
