// What every command of the command line is made of (src/cli.ts lists them): its spec, argument
// parsing, configuration and the database, so no command repeats that boilerplate.
import { ConfigError, loadConfig, type Config } from '../config.js';
import { openDatabase, type Db } from '../db/index.js';

export interface CliIo {
  out(line: string): void;
  err(line: string): void;
  env: Record<string, string | undefined>;
  stdin?: () => Promise<string>;
  /** Progress of long work (the demo loader), on a terminal; absent in tests. */
  progress?: (done: number, total: number, items: number) => void;
}

/** Exit codes: 0 success (or a valid token), 1 failure (an invalid token), 2 usage error, 4 the embedded database is held by another process. */
export const EXIT = { ok: 0, invalid: 1, usage: 2, busy: 4 } as const;
/** Returned by commands that keep running (serve): the process must not exit. */
export const RUNNING = 'running' as const;

export class UsageError extends Error {}

type Options = Record<string, string | true>;

export interface CommandContext {
  /** Positional arguments (after the command words and options). */
  args: string[];
  /** Options given: `value` options as their string, `flag` options as true. */
  options: Options;
  io: CliIo;
}

export interface Command {
  /** One or more words, e.g. "verify" or "keys rotate". */
  name: string;
  usage: string;
  summary: string;
  /** Options the command takes: `value` ones need a value (`--x v` or `--x=v`), `flag` ones none. */
  options?: Record<string, 'value' | 'flag'>;
  /** Positional arguments taken: [min, max] (default none), with what to say when the count is wrong. */
  positional?: { min: number; max: number; message: string };
  /** The command parses its own arguments (gets them raw in `args`, `options` empty). */
  rawArgs?: boolean;
  run(ctx: CommandContext): Promise<number | typeof RUNNING>;
}

/** Splits options from positional arguments per the command's spec; unknown options are usage errors. */
export function parseArgs(cmd: Command, args: string[]): { positional: string[]; options: Options } {
  const spec = cmd.options ?? {};
  const positional: string[] = [];
  const options: Options = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a.startsWith('--') && a.length > 2) {
      const eq = a.indexOf('=');
      const name = a.slice(2, eq === -1 ? undefined : eq);
      const kind = spec[name];
      if (!kind) throw new UsageError(`unknown option --${name}`);
      if (kind === 'flag') {
        if (eq !== -1) throw new UsageError(`--${name} takes no value`);
        options[name] = true;
        continue;
      }
      const value = eq === -1 ? args[++i] : a.slice(eq + 1);
      if (value === undefined || value === '') throw new UsageError(`--${name} needs a value`);
      options[name] = value;
    } else positional.push(a);
  }
  const { min, max, message } = cmd.positional ?? { min: 0, max: 0, message: `${cmd.name} takes no arguments` };
  if (positional.length < min || positional.length > max) throw new UsageError(message);
  return { positional, options };
}

/** The configuration from the environment; a bad value is a usage error naming the variable. */
export function configOf(io: CliIo): Config {
  try {
    return loadConfig(io.env);
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(`configuration error: ${err.message}`);
    throw err;
  }
}

/**
 * Runs `fn` with the configured database open (and migrated), closing it afterwards. A PGlite
 * data directory held by a running service fails at once with DataDirBusyError (pid lock file),
 * which runCli turns into one line: no wait, no second writer.
 */
export async function withDatabase<T>(config: Config, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

