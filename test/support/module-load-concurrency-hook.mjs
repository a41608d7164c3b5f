// A module-loading hook for test/config-lifecycle.test.ts: records in the file named by
// MODULE_LOAD_PEAK_LOG the most file loads it saw in flight at once. Registered before the
// service's own loading bound (src/module-loading-hook.mjs), it runs inside it: what it records is
// what reaches the file system.
import { writeFileSync } from 'node:fs';

const log = process.env.MODULE_LOAD_PEAK_LOG;
let inFlight = 0;
let peak = 0;
let loads = 0;

export async function load(url, context, next) {
  if (!url.startsWith('file:')) return next(url, context);
  inFlight++;
  loads++;
  if (inFlight > peak) peak = inFlight;
  try {
    return await next(url, context);
  } finally {
    inFlight--;
    if (log) writeFileSync(log, JSON.stringify({ peak, loads }));
  }
}
