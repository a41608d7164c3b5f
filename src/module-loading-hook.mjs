// A module-loading hook (node:module register) that bounds how many modules are read at once.
// Registered by src/module-loading.ts; plain JavaScript because it runs on Node's loader thread,
// ahead of any TypeScript support.
//
// Node's ESM loader fetches every module of the graph as soon as an import names it, so the
// number of source files open at one moment is the loader's frontier: with about 1,200 modules in
// the service's graph that reached the 256-descriptor limit of the idle-socket script in CI
// (EMFILE at start-up), and an operator's low limit (macOS shells default to 256) would do the
// same. Through this hook at most `MAX_LOADS_AT_ONCE` loads (and so open files) are in flight;
// the rest wait their turn. Loading order and results are unchanged.

/** Loads in flight at once: enough to keep the disk and the transpiler busy, far below any limit. */
export const MAX_LOADS_AT_ONCE = 16;

let active = 0;
/** @type {Array<() => void>} */
const waiting = [];

function acquire() {
  if (active < MAX_LOADS_AT_ONCE) {
    active++;
    return undefined;
  }
  return new Promise((resolve) => waiting.push(resolve));
}

/** Hands the slot to the next waiting load, or frees it. */
function release() {
  const next = waiting.shift();
  if (next) next();
  else active--;
}

export async function load(url, context, nextLoad) {
  // Built-ins and data: URLs open no file.
  if (!url.startsWith('file:')) return nextLoad(url, context);
  await acquire();
  try {
    return await nextLoad(url, context);
  } finally {
    release();
  }
}
