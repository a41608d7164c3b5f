import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// The layering of docs/architecture.md as a check that fails, not a convention: services know no
// transport (nothing from src/http, src/agents, src/pages or fastify), and domain code is pure
// (it imports only other domain modules and packages, never stores, services or adapters).

const SRC = path.resolve('src');

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

/** Every module specifier a file imports or re-exports (static and dynamic). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g)) {
    out.push((m[1] ?? m[2] ?? m[3])!);
  }
  return out;
}

/** True when every import from node:net in `text` names only isIP, isIPv4 or isIPv6. */
function onlyAddressPredicates(text: string): boolean {
  const clauses = [...text.matchAll(/import\s+([^;]*?)\s+from\s+['"]node:net['"]/g)].map((m) => m[1]!);
  return clauses.length > 0 && clauses.every((c) => /^\{\s*(isIP|isIPv4|isIPv6)(\s*,\s*(isIP|isIPv4|isIPv6))*\s*,?\s*\}$/.test(c));
}

/** The src/ top-level folder a relative import of `file` lands in ('' for src/*.ts itself). */
function layerOf(file: string, spec: string): string | null {
  if (!spec.startsWith('.')) return null;
  const target = path.relative(SRC, path.resolve(path.dirname(file), spec));
  if (target.startsWith('..')) return `outside:${target}`;
  return target.includes(path.sep) ? target.split(path.sep)[0]! : '';
}

describe('layering', () => {
  it('services import nothing from a transport adapter', () => {
    const bad: string[] = [];
    for (const f of filesUnder(path.join(SRC, 'services'))) {
      for (const spec of importsOf(f)) {
        const layer = layerOf(f, spec);
        if (layer === 'http' || layer === 'agents' || layer === 'pages' || /^(fastify|@fastify\/)/.test(spec)) bad.push(`${path.relative(SRC, f)} imports ${spec}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('domain modules are pure: only other domain modules and packages', () => {
    const bad: string[] = [];
    for (const f of filesUnder(path.join(SRC, 'domain'))) {
      for (const spec of importsOf(f)) {
        const layer = layerOf(f, spec);
        // The generated contract (gen/) is message types and descriptors: data, no I/O.
        const contract = layer !== null && /^outside:\.\.[\\/]gen[\\/]/.test(layer);
        if (layer !== null && layer !== 'domain' && !contract) bad.push(`${path.relative(SRC, f)} imports ${spec}`);
        if (/^node:(fs|http|https|http2|dns|child_process|worker_threads)/.test(spec)) bad.push(`${path.relative(SRC, f)} imports ${spec}`);
        // node:net only for its pure address predicates (isIP, isIPv4, isIPv6), never sockets.
        if (spec === 'node:net' && !onlyAddressPredicates(readFileSync(f, 'utf8'))) bad.push(`${path.relative(SRC, f)} imports sockets from node:net`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('the node:net rule tells address predicates from sockets', () => {
    expect(onlyAddressPredicates(`import { isIPv4, isIPv6 } from 'node:net';`)).toBe(true);
    expect(onlyAddressPredicates(`import { createServer } from 'node:net';`)).toBe(false);
    expect(onlyAddressPredicates(`import net from 'node:net';`)).toBe(false);
  });

  it('the scan sees imports (a file known to import from src/http is reported)', () => {
    const server = path.join(SRC, 'server.ts');
    expect(importsOf(server).map((s) => layerOf(server, s))).toContain('http');
  });
});
