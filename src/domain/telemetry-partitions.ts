// Monthly partitions of the raw telemetry table (migration 1000_telemetry_partitioned.sql) and
// the retention plan. A partition named telemetry_pYYYY_MM holds received_at in [first of that
// month, first of the next) in UTC; telemetry_default holds whatever no monthly partition
// covers, so an insert is never refused. Only partitions with that exact name are managed.

export const DEFAULT_PARTITION = 'telemetry_default';
const NAME = /^telemetry_p(\d{4})_(\d{2})$/;
const DAY_MS = 86_400_000;

/** Partitions kept ready beyond the current month (the job runs every few hours; two months is slack enough). */
export const PARTITION_MONTHS_AHEAD = 2;

export interface TelemetryPartition {
  name: string;
  /** Inclusive lower bound (UTC midnight, first of the month). */
  from: Date;
  /** Exclusive upper bound (first of the next month). */
  to: Date;
}

/** First instant (UTC) of the month containing `t`. */
export function monthStart(t: Date): Date {
  return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth(), 1));
}

/** First instant (UTC) of the month `n` months after the one containing `t` (n may be negative). */
export function addMonths(t: Date, n: number): Date {
  return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + n, 1));
}

/** The partition of the month containing `t`. */
export function partitionFor(t: Date): TelemetryPartition {
  const from = monthStart(t);
  const name = `telemetry_p${String(from.getUTCFullYear()).padStart(4, '0')}_${String(from.getUTCMonth() + 1).padStart(2, '0')}`;
  return { name, from, to: addMonths(from, 1) };
}

export function isPartitionName(name: string): boolean {
  return parsePartitionName(name) !== null;
}

/** The managed partition a table name denotes, or null for any other table. */
export function parsePartitionName(name: string): TelemetryPartition | null {
  const m = NAME.exec(name);
  if (!m) return null;
  const month = Number(m[2]);
  if (month < 1 || month > 12) return null;
  return partitionFor(new Date(Date.UTC(Number(m[1]), month - 1, 1)));
}

/** Oldest instant kept at `at` with a retention of `days` (0 = keep forever: null). */
export function retentionCutoff(at: Date, days: number): Date | null {
  return days > 0 ? new Date(at.getTime() - days * DAY_MS) : null;
}

export interface PartitionPlan {
  /** Partitions to create, oldest first. */
  create: TelemetryPartition[];
  /** Partitions entirely older than the retention cutoff, to drop. */
  drop: TelemetryPartition[];
  /** Rows of the default partition older than this are deleted (null: none). */
  cutoff: Date | null;
}

/**
 * What the maintenance job does at `at`: make sure this month and the next
 * PARTITION_MONTHS_AHEAD months have partitions; give a partition to any month whose rows sit in
 * the default partition (rows written while no partition covered them), unless that month is
 * already expired or beyond the months kept ready; drop every partition that ends at or before
 * the retention cutoff (a partition is dropped only when ALL its rows are expired, so the data
 * kept is the retention period plus at most one month).
 */
export function planPartitions(opts: {
  at: Date;
  retentionDays: number;
  existing: readonly TelemetryPartition[];
  defaultMonths: readonly Date[];
  monthsAhead?: number;
}): PartitionPlan {
  const cutoff = retentionCutoff(opts.at, opts.retentionDays);
  const have = new Set(opts.existing.map((p) => p.name));
  const last = addMonths(opts.at, opts.monthsAhead ?? PARTITION_MONTHS_AHEAD);
  const wanted = new Map<string, TelemetryPartition>();
  for (let m = monthStart(opts.at); m.getTime() <= last.getTime(); m = addMonths(m, 1)) {
    const p = partitionFor(m);
    wanted.set(p.name, p);
  }
  for (const m of opts.defaultMonths) {
    const p = partitionFor(m);
    if (p.from.getTime() > last.getTime()) continue;
    if (cutoff !== null && p.to.getTime() <= cutoff.getTime()) continue;
    wanted.set(p.name, p);
  }
  const create = [...wanted.values()]
    .filter((p) => !have.has(p.name) && (cutoff === null || p.to.getTime() > cutoff.getTime()))
    .sort((a, b) => a.from.getTime() - b.from.getTime());
  const drop = cutoff === null ? [] : opts.existing.filter((p) => p.to.getTime() <= cutoff.getTime());
  return { create, drop, cutoff };
}
