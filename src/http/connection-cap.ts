// How many client connections one process may hold open. Every connection is a file descriptor;
// when the process runs out of them it can accept nothing and open nothing (PGlite's files,
// PostgreSQL connections, probes), so the cap keeps a reserve of descriptors for everything else.
import { readdirSync, readFileSync } from 'node:fs';
import { PROBLEMS } from '../errors.js';
import { CONTENT_TYPE, encodeStatus, otlpExportEncoding } from './otlp-codec.js';
import { rawProblem, rawResponse } from './socket-answers.js';

export interface DescriptorUsage {
  /** The soft RLIMIT_NOFILE, or null where it cannot be read (not Linux). */
  softLimit: number | null;
  /** Descriptors open now, or null where they cannot be counted. */
  inUse: number | null;
}

export interface ConnectionCap {
  /** Connections served at once (MAX_CONNECTIONS, or derived from the descriptor limit). */
  served: number;
  /** A few more are accepted only to be answered 503 and closed; beyond served + overflow, new connections are closed at accept. */
  overflow: number;
  /** How `served` was chosen, for the start-up log line. */
  source: 'MAX_CONNECTIONS' | 'descriptor limit' | 'default';
}

/** Used when the descriptor limit cannot be read (not Linux). */
export const FALLBACK_MAX_CONNECTIONS = 1_000;
/** A derived cap never goes beyond this, however high the descriptor limit. */
export const DERIVED_MAX_CONNECTIONS = 65_536;
const MIN_CONNECTIONS = 4;

/** Connections answered 503 beyond the served ones. */
export function overflowFor(served: number): number {
  return Math.max(4, Math.ceil(served / 16));
}

/**
 * The cap: MAX_CONNECTIONS when set; otherwise what the descriptor limit leaves after the
 * descriptors already open (database files, pipes) and a reserve (max(64, limit/8)) for what
 * the service opens later (database connections, probes, files of new partitions).
 */
export function connectionCap(configured: number, usage: DescriptorUsage): ConnectionCap {
  if (configured > 0) return { served: configured, overflow: overflowFor(configured), source: 'MAX_CONNECTIONS' };
  if (usage.softLimit === null) return { served: FALLBACK_MAX_CONNECTIONS, overflow: overflowFor(FALLBACK_MAX_CONNECTIONS), source: 'default' };
  const reserve = Math.max(64, Math.floor(usage.softLimit / 8));
  const budget = usage.softLimit - (usage.inUse ?? 0) - reserve;
  // served + overflow must fit the budget: served * 17/16 (rounded) <= budget.
  const served = Math.min(DERIVED_MAX_CONNECTIONS, Math.max(MIN_CONNECTIONS, Math.floor((budget * 16) / 17) - 4));
  return { served, overflow: overflowFor(served), source: 'descriptor limit' };
}

/** A derived per-client limit never goes below this (a browser opens six, an agent's pool a few more). */
export const MIN_CONNECTIONS_PER_CLIENT = 16;

/**
 * Connections one client network may hold (MAX_CONNECTIONS_PER_CLIENT, or an eighth of the served
 * connections, at least MIN_CONNECTIONS_PER_CLIENT): one client alone can never hold every
 * connection the service serves; it takes eight networks, where it took one.
 */
export function perClientLimit(configured: number, served: number): number {
  if (configured > 0) return configured;
  return Math.max(MIN_CONNECTIONS_PER_CLIENT, Math.ceil(served / 8));
}

/** This process's descriptor limit and count, from /proc (Linux); nulls elsewhere. */
export function descriptorUsage(): DescriptorUsage {
  let softLimit: number | null = null;
  let inUse: number | null = null;
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    if (soft && /^\d+$/.test(soft)) softLimit = Number(soft);
  } catch {
    /* not Linux */
  }
  try {
    inUse = readdirSync('/proc/self/fd').length;
  } catch {
    /* not Linux */
  }
  return { softLimit, inUse };
}

/** Seconds a refused connection is told to wait (Retry-After). */
export const CAP_RETRY_AFTER_SECONDS = 2;

/**
 * The answer to an HTTP/1.1 connection refused at the cap, `head` being the first bytes it sent:
 * problem+json, or for an OTLP/HTTP export the google.rpc.Status that OTLP wants in the export's
 * encoding (with a RetryInfo), both with the refusal's status (429 or 503) and Retry-After.
 */
export function capRefusal(head: Uint8Array, code: 'rate_limited' | 'unavailable', detail: string): string | Buffer {
  const headers = { 'Retry-After': String(CAP_RETRY_AFTER_SECONDS) };
  const otlp = otlpExportEncoding(head);
  if (otlp === null) return rawProblem(code, detail, headers);
  const { status, code: grpcCode } = PROBLEMS[code];
  return rawResponse(status, CONTENT_TYPE[otlp], encodeStatus(grpcCode, detail, otlp, CAP_RETRY_AFTER_SECONDS), headers);
}
