// `npm start` / `observatory serve`: the serving process's start, run and shutdown. Reached through
// src/main.ts (the entry point, which first sets the process up) or src/cli.ts.
// The V8 settings of the serving process (src/runtime-flags.ts) also when `observatory serve` starts it.
import './runtime-flags.js';
import { ConfigError, type Config } from './config.js';
import { DataDirBusyError } from './db/pglite.js';
import { KeyEncryptionError } from './signing/key-encryption.js';
import { SigningKeyError } from './signing/keyring.js';
import type { DualProtocolServer } from './http/listener.js';
import { createObservatory } from './server.js';
import { createBundleGate } from './bundle-gate.js';

/** `npm start` / `observatory serve`: runs the service until SIGTERM or SIGINT. */
export async function serve(config: Config): Promise<void> {
  // GATE_BUNDLE_URL: a database-less gate answering from a mirrored bundle (docs/bundles.md).
  const obs = config.gateBundle.url ? await createBundleGate(config) : await createObservatory(config);
  const address = await obs.listen();
  const { cap, perClient } = (obs.app.server as DualProtocolServer).connectionStats();
  if ('mirror' in obs) {
    const s = obs.mirror.status();
    obs.app.log.info({ address, mode: 'bundle-gate', bundle_source: s.source, bundle: s.bundle?.bundle_id ?? null, bundle_state: s.state, last_error: s.last_error }, 'trust observatory gate listening (from a bundle, no database)');
  } else {
    obs.app.log.info(
      { address, database: obs.db.kind, public_base_url: config.publicBaseUrl, max_connections: cap?.served, max_connections_source: cap?.source, max_connections_per_client: perClient },
      'trust observatory listening',
    );
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    obs.app.log.info({ signal }, 'shutting down: finishing in-flight requests');
    const force = setTimeout(() => process.exit(1), 15_000);
    force.unref();
    obs.close().then(
      () => process.exit(0),
      (err: unknown) => {
        obs.app.log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/** Prints a start-up failure as one line naming its cause, never a stack trace for known causes. */
export function exitOnStartupError(err: unknown): never {
  if (err instanceof ConfigError) console.error(`configuration error: ${err.message}`);
  else if (err instanceof DataDirBusyError || err instanceof KeyEncryptionError || err instanceof SigningKeyError) console.error(`cannot start: ${err.message}`);
  else if ((err as NodeJS.ErrnoException)?.code === 'EADDRINUSE') console.error(`cannot start: ${(err as Error).message}`);
  else console.error(`cannot start: ${(err as Error)?.message ?? String(err)}`);
  process.exit(1);
}
