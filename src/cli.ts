import { readFile } from 'node:fs/promises';
import { ConfigError } from './config.js';
import { DataDirBusyError } from './db/pglite.js';
import { configOf, EXIT, parseArgs, RUNNING, UsageError, withDatabase, type CliIo, type Command } from './cli/command.js';
import { CatalogueImportError } from './services/catalogue.js';
import { demoCommand, importCommand, observeCommand } from './cli/catalogue.js';
import { existsSync } from 'node:fs';
import { verifyCompact } from './signing/jws.js';
import { loadJwksFrom, readBundleText, verifyBundle } from './signing/bundle.js';
import { bundleKeys, bundlePullCommand } from './cli/bundle.js';
import { revokeSigningKey, rotateSigningKey, SigningKeyError } from './signing/keyring.js';
import { KeyEncryptionError, resolveKeyEncryptionKey } from './signing/key-encryption.js';
import type { VerificationKey } from './signing/jws.js';
import { checkCommand } from './cli/check.js';
import { terminalText } from './cli/terminal-text.js';

// The command-line entry: `observatory <command>` (bin/observatory.js) or `npm run observatory --
// <command>`. Every command is one entry of COMMANDS; adding a command means adding an entry.

export { EXIT, RUNNING, type CliIo, type Command } from './cli/command.js';

/** Reads a JWKS from a file or an http(s) URL (src/signing/bundle.ts); a failure is one usage line. */
async function loadJwks(source: string): Promise<Map<string, VerificationKey>> {
  return loadJwksFrom(source).catch((err: Error) => {
    throw new UsageError(err.message);
  });
}

/** The payload's kind of a compact JWS, without verifying it (which path verifies it). */
function kindOf(token: string): unknown {
  try {
    return (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { kind?: unknown }).kind;
  } catch {
    return undefined;
  }
}

const verifyCommand: Command = {
  name: 'verify',
  usage: 'verify <jws|bundle-file|-> [--jwks <file-or-url>]',
  summary:
    'Verify a receipt (compact JWS) or a bundle (file from bundle pull, or its JWS) offline against a JWKS file or URL (default: $PUBLIC_BASE_URL/.well-known/jwks.json; for a bundle file, the JWKS inside it)',
  options: { jwks: 'value' },
  positional: { min: 1, max: 1, message: 'verify takes exactly one token or bundle file (or - to read it from stdin)' },
  async run({ args, options, io }) {
    let token = args[0]!;
    if (token === '-') {
      if (!io.stdin) throw new UsageError('no stdin to read the token from');
      token = (await io.stdin()).trim();
    } else if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(token) && existsSync(token)) {
      token = (await readFile(token, 'utf8')).trim();
    }
    // A bundle (a bundle file, or a JWS whose payload says kind "bundle"): its own rules and size.
    const read = readBundleText(token);
    if ('jws' in read && (read.file !== null || kindOf(read.jws) === 'bundle')) {
      const { keys, from } = await bundleKeys(read.file, options.jwks as string | undefined);
      const now = new Date();
      const v = await verifyBundle(read.jws, keys, now);
      if (!v.valid) {
        io.err(`invalid: ${v.reason}`);
        return EXIT.invalid;
      }
      const p = v.payload;
      if (!options.jwks && read.file) io.err('note: verified against the JWKS inside the file; pin the observatory\'s key with --jwks <file-or-url> to verify who signed it');
      io.out(
        JSON.stringify(
          {
            valid: true,
            kind: 'bundle',
            kid: v.kid,
            keys_from: from,
            bundle_id: p.bundle_id,
            issuer: p.iss,
            issued_at: new Date(p.iat * 1000).toISOString(),
            expires_at: new Date(p.exp * 1000).toISOString(),
            filters: p.filters,
            delta: p.delta,
            server_count: p.server_count,
            servers_in_document: p.servers.length,
            removed: p.removed.length,
          },
          null,
          2,
        ),
      );
      return EXIT.ok;
    }
    const source = (options.jwks as string | undefined) ?? `${configOf(io).publicBaseUrl}/.well-known/jwks.json`;
    const keys = await loadJwks(source);
    const v = await verifyCompact(token, async (kid) => keys.get(kid) ?? null, { now: new Date() });
    if (!v.valid) {
      io.err(`invalid: ${v.reason}`);
      return EXIT.invalid;
    }
    io.out(JSON.stringify({ valid: true, kid: v.header.kid, header: v.header, payload: v.payload }, null, 2));
    return EXIT.ok;
  },
};

const keysRotateCommand: Command = {
  name: 'keys rotate',
  usage: 'keys rotate',
  summary: 'Make a new Ed25519 signing key active in the configured database; the old key retires (it verifies what it signed before) and its private half is destroyed',
  async run({ io }) {
    const config = configOf(io);
    if (config.signingKeyJwk) {
      throw new UsageError('SIGNING_KEY_JWK is set, so that key signs: rotate by supplying a new key in SIGNING_KEY_JWK (the old public key stays published)');
    }
    const kid = await withDatabase(config, (db) => rotateSigningKey(db, { kek: resolveKeyEncryptionKey(config, db).kek }));
    io.out(`new active signing key: ${kid}`);
    io.out('running instances sign with it within 10 seconds; the previous key retires in 60 seconds and keeps verifying what it signed before');
    return EXIT.ok;
  },
};

const keysRevokeCommand: Command = {
  name: 'keys revoke',
  usage: 'keys revoke <kid>',
  summary: 'Revoke a signing key (a compromised one): it leaves the JWKS and verifies nothing, not even what it signed before; revoking the active key makes a new key active',
  positional: { min: 1, max: 1, message: 'keys revoke takes exactly one kid (see /.well-known/jwks.json)' },
  async run({ args, io }) {
    const config = configOf(io);
    const kid = args[0]!;
    const r = await withDatabase(config, async (db) => {
      // The secret is only needed to seal a replacement for the active key.
      const kek = config.signingKeyJwk ? null : resolveKeyEncryptionKey(config, db).kek;
      return revokeSigningKey(db, kid, { kek, signingKeyJwk: config.signingKeyJwk });
    });
    io.out(`revoked signing key: ${r.revoked}`);
    if (r.newActive) io.out(`new active signing key: ${r.newActive}`);
    io.out('running instances stop publishing and accepting it within 10 seconds; receipts it signed no longer verify');
    return EXIT.ok;
  },
};

const serveCommand: Command = {
  name: 'serve',
  usage: 'serve',
  summary: 'Run the service (same as npm start), configured by environment variables; it observes tracked servers unless OBSERVE_ENABLED=0',
  positional: { min: 0, max: 0, message: 'serve takes no arguments; configure it with environment variables' },
  async run({ io }) {
    const { serve } = await import('./serve.js');
    await serve(configOf(io));
    return RUNNING;
  },
};

const checkCliCommand: Command = {
  name: 'check',
  usage: 'check <server-url> [--observatory <base-url>] [--json] | check <server> --bundle <file> [--jwks <file-or-url>]',
  summary:
    'CI gate: print the agency-mcp-2026 compliance attestation and exit with its ci.exit_code (0 PASS, 1 FAIL, 2 PARTIAL, 3 check not made); with --bundle, offline from a pulled bundle (0 PASS, 1 FAIL, 2 UNCERTAIN/UNRATED, 3 bundle expired or badly signed)',
  rawArgs: true,
  run: ({ args, io }) => checkCommand(args, { ...io, fetch: globalThis.fetch }),
};

/** Every command, in the order --help lists them. Add new commands here. */
export const COMMANDS: Command[] = [serveCommand, demoCommand, importCommand, observeCommand, checkCliCommand, bundlePullCommand, verifyCommand, keysRotateCommand, keysRevokeCommand];

export function helpText(): string {
  const width = Math.max(...COMMANDS.map((c) => c.usage.length));
  return [
    'usage: observatory <command> [arguments]',
    '',
    'commands:',
    ...COMMANDS.map((c) => `  ${c.usage.padEnd(width)}  ${c.summary}`),
    '',
    'exit codes: 0 success (valid), 1 failure (invalid), 2 usage error, 4 the embedded database is in use by a running service;',
    '            check: its ci.exit_code, 3 when the check could not be made',
  ].join('\n');
}

/** Runs one command line; resolves to the exit code, or RUNNING for commands that keep serving. */
export async function runCli(argv: string[], given: CliIo): Promise<number | typeof RUNNING> {
  // Every line a command prints passes through terminalText (src/cli/terminal-text.ts).
  const io: CliIo = { ...given, out: (l) => given.out(terminalText(l)), err: (l) => given.err(terminalText(l)) };
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    (argv.length === 0 ? io.err : io.out)(helpText());
    return argv.length === 0 ? EXIT.usage : EXIT.ok;
  }
  // Longest matching command name wins ("keys rotate" before a hypothetical "keys").
  const match = [...COMMANDS]
    .sort((a, b) => b.name.split(' ').length - a.name.split(' ').length)
    .find((c) => {
      const words = c.name.split(' ');
      return words.every((w, i) => argv[i] === w);
    });
  if (!match) {
    io.err(`unknown command: ${argv.join(' ')}\n\n${helpText()}`);
    return EXIT.usage;
  }
  const rest = argv.slice(match.name.split(' ').length);
  if (rest.includes('--help') || rest.includes('-h')) {
    io.out(`usage: observatory ${match.usage}\n\n${match.summary}`);
    return EXIT.ok;
  }
  try {
    const { positional, options } = match.rawArgs ? { positional: rest, options: {} } : parseArgs(match, rest);
    return await match.run({ args: positional, options, io });
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`${err.message}\nusage: observatory ${match.usage}`);
      return EXIT.usage;
    }
    if (err instanceof ConfigError) {
      io.err(`configuration error: ${err.message}`);
      return EXIT.usage;
    }
    if (err instanceof SigningKeyError || err instanceof KeyEncryptionError) {
      io.err(`cannot run ${match.name}: ${err.message}`);
      return EXIT.invalid;
    }
    if (err instanceof DataDirBusyError) {
      io.err(`cannot run ${match.name}: ${err.message}`);
      return EXIT.busy;
    }
    if (err instanceof CatalogueImportError) {
      io.err(`import failed: ${err.message}`);
      return EXIT.invalid;
    }
    io.err(`${match.name} failed: ${(err as Error)?.message ?? String(err)}`);
    return EXIT.invalid;
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function progressBar(done: number, total: number, items: number): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${Math.round((done / total) * 100)}%  ${done}/${total}  ${items.toLocaleString('en')}${done === total ? '\n' : ''}`);
}

/** Process entry used by bin/observatory.js and `tsx src/cli.ts`. */
export async function cliMain(argv: string[] = process.argv.slice(2)): Promise<void> {
  const code = await runCli(argv, {
    out: (l) => console.log(l),
    err: (l) => console.error(l),
    env: process.env,
    stdin: readStdin,
    progress: process.stderr.isTTY ? progressBar : undefined,
  });
  if (code !== RUNNING) process.exitCode = code;
}

const isEntry = process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isEntry) await cliMain();
