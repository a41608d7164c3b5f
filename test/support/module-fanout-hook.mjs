// A module-resolution hook for test/config-lifecycle.test.ts: appends "parent<TAB>child" for every
// import resolved to the file named by MODULE_FANOUT_LOG, so the test can find the module that
// imports the most files at once (node's ESM loader opens all of a module's imports concurrently).
import { appendFileSync } from 'node:fs';

const log = process.env.MODULE_FANOUT_LOG;

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (log && context.parentURL) appendFileSync(log, `${context.parentURL}\t${resolved.url}\n`);
  return resolved;
}
