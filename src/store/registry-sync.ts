import type { Queryable } from '../db/index.js';
import { onTelemetryCommitted } from './telemetry.js';
import { BoundedMap } from './cache-limits.js';

// The MCP Registry side of catalogued servers (docs/observation.md "Registry sync"): each
// server's listing status, and the incremental sync's position per registry. Columns
// registry_status* on servers, table registry_sync_state.

export type ListingStatus = 'active' | 'deprecated' | 'deleted';

export interface ListingUpdate {
  status: ListingStatus;
  message: string | null;
  changedAt: Date | null;
  updatedAt: Date | null;
}

/** A server's registry listing as the trust record and pre-flight show it. */
export interface RegistryListingRow {
  registry_name: string;
  registry_status: ListingStatus;
  registry_status_message: string | null;
  registry_status_changed_at: Date | null;
  registry_updated_at: Date | null;
}

export interface SyncState {
  source: string;
  /** The greatest entry updatedAt a complete sync saw, as the registry wrote it. */
  high_water: string | null;
  last_run_at: Date | null;
  last_ok_at: Date | null;
  last_error: string | null;
  last_summary: Record<string, unknown> | null;
}

export function registrySyncStore(db: Queryable) {
  return {
    /** Records the registry's status of one catalogued server (call in the import's transaction). */
    async setListing(serverId: number, u: ListingUpdate): Promise<void> {
      await db.query(
        'UPDATE servers SET registry_status = $2, registry_status_message = $3, registry_status_changed_at = $4, registry_updated_at = $5 WHERE id = $1',
        [serverId, u.status, u.message, u.changedAt, u.updatedAt],
      );
    },

    /** setListing for many servers in one statement (the bulk import path). */
    async setListings(rows: readonly ({ serverId: number } & ListingUpdate)[]): Promise<void> {
      if (rows.length === 0) return;
      await db.query(
        `UPDATE servers s SET registry_status = u.status, registry_status_message = u.message, registry_status_changed_at = u.changed, registry_updated_at = u.updated
           FROM unnest($1::int8[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[]) AS u(id, status, message, changed, updated)
          WHERE s.id = u.id`,
        [rows.map((r) => r.serverId), rows.map((r) => r.status), rows.map((r) => r.message), rows.map((r) => r.changedAt?.toISOString() ?? null), rows.map((r) => r.updatedAt?.toISOString() ?? null)],
      );
    },

    /**
     * Marks every server listed under a registry name as deleted there and takes it off the
     * observation schedule (it keeps its evidence). Returns the ids it changed.
     */
    async withdraw(registryName: string, u: Omit<ListingUpdate, 'status'>): Promise<number[]> {
      const rows = await db.query<{ id: number }>(
        `UPDATE servers SET registry_status = 'deleted', registry_status_message = $2, registry_status_changed_at = $3, registry_updated_at = $4
          WHERE lower(registry_name) = lower($1) RETURNING id`,
        [registryName, u.message, u.changedAt, u.updatedAt],
      );
      const ids = rows.map((r) => Number(r.id));
      if (ids.length > 0) await db.query('DELETE FROM observation_schedule WHERE server_id = ANY($1::int8[])', [ids]);
      return ids;
    },

    /** The registry listing of a server; null when no registry import listed it. */
    async listing(serverId: number): Promise<RegistryListingRow | null> {
      const rows = await db.query<RegistryListingRow>(
        `SELECT registry_name, registry_status, registry_status_message, registry_status_changed_at, registry_updated_at
           FROM servers WHERE id = $1 AND registry_name IS NOT NULL AND registry_status IS NOT NULL`,
        [serverId],
      );
      return rows[0] ?? null;
    },

    async state(source: string): Promise<SyncState | null> {
      const rows = await db.query<SyncState>('SELECT source, high_water, last_run_at, last_ok_at, last_error, last_summary FROM registry_sync_state WHERE source = $1', [source]);
      return rows[0] ?? null;
    },

    /** Records a sync run; a null highWater keeps the stored one (the caller only ever moves it forward). */
    async recordRun(source: string, r: { at: Date; ok: boolean; highWater: string | null; error: string | null; summary: Record<string, unknown> | null }): Promise<void> {
      await db.query(
        `INSERT INTO registry_sync_state AS s (source, high_water, last_run_at, last_ok_at, last_error, last_summary)
         VALUES ($1, $2, $3, CASE WHEN $4 THEN $3::timestamptz END, $5, $6)
         ON CONFLICT (source) DO UPDATE SET
           high_water = COALESCE(EXCLUDED.high_water, s.high_water),
           last_run_at = EXCLUDED.last_run_at,
           last_ok_at = COALESCE(EXCLUDED.last_ok_at, s.last_ok_at),
           last_error = EXCLUDED.last_error,
           last_summary = COALESCE(EXCLUDED.last_summary, s.last_summary)`,
        [source, r.highWater, r.at, r.ok, r.error, r.summary === null ? null : JSON.stringify(r.summary)],
      );
    },
  };
}

// Listings remembered per database handle for the pre-flight and trust-record hot paths, misses
// included (most servers were never listed): read by src/services/server-facts.ts in one statement
// with the server's other side facts. An import in this process forgets the servers it changed at
// once (notifyServersChanged); other instances' changes show within the caller's bound
// (SCORE_CACHE_MS). Bounded (CACHE_MAX_ENTRIES).
const listingMemos = new WeakMap<Queryable, BoundedMap<number, { row: RegistryListingRow | null; mono: number }>>();

function listingMemo(db: Queryable): BoundedMap<number, { row: RegistryListingRow | null; mono: number }> {
  let memo = listingMemos.get(db);
  if (!memo) {
    const m = (memo = new BoundedMap());
    listingMemos.set(db, m);
    onTelemetryCommitted(db, (ids) => {
      for (const id of ids) m.delete(id);
    });
  }
  return memo;
}

/** A remembered listing of the server read less than `ttlMs` ago (`row` null: not listed); undefined when none is. */
export function cachedListing(db: Queryable, serverId: number, ttlMs: number): { row: RegistryListingRow | null } | undefined {
  const hit = listingMemo(db).get(serverId);
  return hit && performance.now() - hit.mono < ttlMs ? hit : undefined;
}

/** Remembers a listing read at `readStart` (performance.now()), unless a newer read is remembered. */
export function rememberListing(db: Queryable, serverId: number, row: RegistryListingRow | null, readStart: number): void {
  const memo = listingMemo(db);
  const hit = memo.get(serverId);
  if (hit && hit.mono > readStart) return;
  memo.set(serverId, { row, mono: readStart });
}
