import type { Db } from '../db/index.js';
import { DEFAULT_PARTITION, isPartitionName, parsePartitionName, type TelemetryPartition } from '../domain/telemetry-partitions.js';

// DDL and maintenance queries of the monthly telemetry partitions (names and the plan of what
// to create and drop: src/domain/telemetry-partitions.ts).

/** Advisory lock serialising partition DDL (migrations hold 72_620_001, the key ring 72_620_002). */
const PARTITION_DDL_LOCK = 72_620_003;

export function telemetryPartitionStore(db: Db) {
  return {
    /** The monthly partitions attached to telemetry, oldest first (the default partition is not listed). */
    async list(): Promise<TelemetryPartition[]> {
      const rows = await db.query<{ relname: string }>(
        `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'telemetry'::regclass`,
      );
      return rows
        .map((r) => parsePartitionName(r.relname))
        .filter((p): p is TelemetryPartition => p !== null)
        .sort((a, b) => a.from.getTime() - b.from.getTime());
    },

    /** Months (first instants) that have rows in the default partition. Normally none. */
    async defaultMonths(): Promise<Date[]> {
      const rows = await db.query<{ m: Date }>(
        `SELECT DISTINCT date_trunc('month', received_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m FROM ${DEFAULT_PARTITION} ORDER BY 1`,
      );
      return rows.map((r) => r.m);
    },

    /**
     * Creates the partition of one month. Rows of that month already in the default partition
     * (written while no partition covered them) move into it in the same transaction; the
     * default partition is locked meanwhile so no new row of that month can slip in between.
     */
    async create(p: TelemetryPartition): Promise<boolean> {
      return db.transaction(async (tx) => {
        // Concurrent creators (a direct call racing the job, two instances) wait, then see it exists.
        await tx.query('SELECT pg_advisory_xact_lock($1)', [PARTITION_DDL_LOCK]);
        const [found] = await tx.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [p.name]);
        if (found?.t) return false;
        await tx.query(`LOCK TABLE ${DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE`);
        await tx.query(`CREATE TABLE ${p.name} (LIKE telemetry INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
        await tx.query(
          `WITH moved AS (DELETE FROM ${DEFAULT_PARTITION} WHERE received_at >= $1 AND received_at < $2 RETURNING *)
           INSERT INTO ${p.name} SELECT * FROM moved`,
          [p.from.toISOString(), p.to.toISOString()],
        );
        // Bounds are literals (ATTACH takes no parameters); they come from Date, never from input.
        await tx.query(`ALTER TABLE telemetry ATTACH PARTITION ${p.name} FOR VALUES FROM ('${p.from.toISOString()}') TO ('${p.to.toISOString()}')`);
        return true;
      });
    },

    /** Drops one monthly partition and its rows. */
    async drop(p: TelemetryPartition): Promise<void> {
      if (!isPartitionName(p.name)) throw new Error(`not a managed telemetry partition: ${p.name}`);
      await db.query(`DROP TABLE IF EXISTS ${p.name}`);
    },

    /** Deletes rows older than `cutoff` from the default partition; returns how many. */
    async deleteDefaultBefore(cutoff: Date): Promise<number> {
      const rows = await db.query<{ n: number }>(
        `WITH d AS (DELETE FROM ${DEFAULT_PARTITION} WHERE received_at < $1 RETURNING 1) SELECT count(*)::int8 AS n FROM d`,
        [cutoff.toISOString()],
      );
      return rows[0]!.n;
    },
  };
}

export type TelemetryPartitionStore = ReturnType<typeof telemetryPartitionStore>;
