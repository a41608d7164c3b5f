import { AGGREGATE_SETTLE_MS } from '../../src/services/cached-figure.js';

/**
 * Waits until whole-index figures (ranked lists, stats, category baselines and counts, demand)
 * show everything committed before the call: they follow new evidence within AGGREGATE_SETTLE_MS
 * (src/services/cached-figure.ts), while a server's own record shows it at once.
 */
export function aggregatesSettled(): Promise<void> {
  return new Promise((r) => setTimeout(r, AGGREGATE_SETTLE_MS + 5));
}
