// `observatory import` (catalogue import from an MCP Registry) and `observatory observe` (active
// observation in the foreground). Both call the services the running observatory uses
// (src/services/catalogue.ts, src/services/observation.ts); docs/observation.md.
import { isRfc3339 } from '../domain/rfc3339.js';
import { createCatalogueService, type ImportSummary } from '../services/catalogue.js';
import type { RoundSummary } from '../services/observation.js';
import { configOf, EXIT, RUNNING, withDatabase, type CliIo, type Command } from './command.js';

export { demoCommand } from './demo.js';

function printImport(s: ImportSummary, io: CliIo): void {
  io.out(`imported ${s.source}: ${s.pages} page${s.pages === 1 ? '' : 's'}, ${s.entries} entries`);
  io.out(`  remote servers: ${s.added} added, ${s.updated} already tracked (metadata updated); tracked without runtime evidence (UNRATED) until observed or reported`);
  io.out(`  local-only servers (packages, no remote): ${s.localOnly} counted, not tracked`);
  if (s.deprecated > 0) io.out(`  deprecated in the registry: ${s.deprecated} (tracked and observed; the trust record and pre-flight say so)`);
  if (s.withdrawn.entries > 0) {
    io.out(`  deleted in the registry: ${s.withdrawn.entries} (${s.withdrawn.servers} tracked server${s.withdrawn.servers === 1 ? '' : 's'} marked deleted, no longer probed): ${s.withdrawn.names.join(', ')}`);
  }
  io.out(`  skipped: ${s.skippedCount}`);
  for (const k of s.skipped) io.out(`    - ${k.name}: ${k.reason}`);
  if (s.skippedCount > s.skipped.length) io.out(`    ... and ${s.skippedCount - s.skipped.length} more`);
  if (s.stoppedEarly) io.out(`  note: ${s.stoppedEarly}`);
  for (const d of s.displaced) io.out(`  renamed ${d.url}: it held the registry name ${d.registryName} without being listed; now ${d.to.name} (slug ${d.to.slug})`);
  for (const c of s.conflicts) io.out(`  conflict: ${c.registryName} (${c.url}) has the slug form of a registry name already bound to ${c.boundTo}; it keeps resolving there`);
  for (const x of s.servers) io.out(`  ${x.added ? '+' : '~'} ${x.registryName}  ${x.transport}  ${x.url}  [${x.category}]`);
}

export const importCommand: Command = {
  name: 'import',
  usage: 'import <file-or-url> [--updated-since <time>] [--json]',
  summary:
    'Track every remote server of an MCP Registry server list (API v0.1 or v0 format): a page saved as a file, or a registry whose pages are followed (a base URL such as https://registry.modelcontextprotocol.io reads /v0.1/servers; a list URL is read as given); --updated-since <RFC 3339 time> asks only for entries updated since then. Deprecated and deleted listings are marked (deleted servers are no longer probed). REGISTRY_SYNC_URL keeps this current while the service runs',
  options: { json: 'flag', 'updated-since': 'value' },
  positional: { min: 1, max: 1, message: 'import takes one file path or registry URL' },
  async run({ args, options, io }) {
    const config = configOf(io);
    const since = options['updated-since'];
    if (typeof since === 'string' && (!isRfc3339(since) || Number.isNaN(Date.parse(since)))) {
      io.err(`--updated-since must be an RFC 3339 time such as 2026-01-31T00:00:00Z, got "${since}"`);
      return EXIT.usage;
    }
    const summary = await withDatabase(config, (db) =>
      createCatalogueService({ db, config, now: () => new Date() }).import(args[0]!, { updatedSince: typeof since === 'string' ? since : null }),
    );
    if (options.json) io.out(JSON.stringify(summary, null, 2));
    else printImport(summary, io);
    return EXIT.ok;
  },
};

function roundLine(s: RoundSummary): string {
  const o = s.outcomes;
  return `observed ${s.probed} server${s.probed === 1 ? '' : 's'}: ${o.ok} ok, ${o.failed} failed, ${o.timeout} timed out, ${o.auth_required} need auth, ${o.unresolved} unresolved, ${o.refused} refused; ${s.driftDetected} manifest drift${s.budgetExhausted ? '; the per-minute budget ran out (OBSERVE_RATE_PER_MINUTE), the rest follow' : ''}`;
}

export const observeCommand: Command = {
  name: 'observe',
  usage: 'observe [--once] [--json]',
  summary:
    'Run active observation in the foreground: probe due tracked servers (initialize + tools/list) on the OBSERVE_* schedule; --once does one round, prints a summary and exits',
  options: { once: 'flag', json: 'flag' },
  async run({ options, io }) {
    const config = configOf(io);
    const { createObservatory } = await import('../server.js');
    const obs = await createObservatory({ ...config, observe: { ...config.observe, enabled: false } }, { logger: false });
    if (options.once) {
      try {
        const s = await obs.services.observation.runRound();
        if (options.json) io.out(JSON.stringify(s, null, 2));
        else {
          io.out(roundLine(s));
          for (const r of s.results) {
            io.out(`  ${r.outcome.padEnd(13)} ${r.name}  ${r.url}  ${Math.round(r.latencyMs)} ms${r.toolCount !== null ? `, ${r.toolCount} tools` : ''}${r.driftDetected ? ', MANIFEST DRIFT' : ''}${r.detail ? `  (${r.detail.slice(0, 160)})` : ''}`);
          }
        }
      } finally {
        await obs.close();
      }
      return EXIT.ok;
    }
    io.out(`observing every ${config.observe.intervalSeconds} s (concurrency ${config.observe.concurrency}, at most ${config.observe.ratePerMinute} probes a minute); Ctrl-C stops`);
    obs.services.observation.start({ onRound: (s) => s.probed > 0 && io.out(`${new Date().toISOString()} ${roundLine(s)}`) });
    const stop = () => {
      obs.close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    return RUNNING;
  },
};
