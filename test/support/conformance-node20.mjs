// @modelcontextprotocol/conformance 0.2.x, the first line whose suite covers MCP 2026-07-28,
// imports fs.globSync (added in Node 22) when it loads, although only its tier-check and
// traceability commands call it, never `server`. Loaded with --import on Node 20, this resolve
// hook gives the suite's own imports of "fs" node:fs plus a globSync that fails loudly if called.
// Nothing else is touched; on Node 22 and later it does nothing.
import fs from 'node:fs';
import { register } from 'node:module';

const FS_WITH_GLOBSYNC = [
  "export * from 'node:fs';",
  "import fs from 'node:fs';",
  'export default fs;',
  "export function globSync() { throw new Error('fs.globSync needs Node 22: conformance tier-check and traceability are not available on Node 20'); }",
].join('\n');

const HOOKS = `export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && (context.parentURL ?? '').includes('/@modelcontextprotocol/conformance/')) {
    return { url: 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(FS_WITH_GLOBSYNC)}), shortCircuit: true };
  }
  return next(specifier, context);
}`;

if (typeof fs.globSync !== 'function') register(`data:text/javascript,${encodeURIComponent(HOOKS)}`);
