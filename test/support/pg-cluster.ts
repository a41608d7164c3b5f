import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

// A throw-away PostgreSQL primary and a streaming replica of it, started from the installed
// PostgreSQL binaries (initdb, pg_basebackup -R, pg_ctl) on free loopback ports in a temp
// directory: the system cluster's configuration is never touched. As root (CI), the clusters run
// as the postgres user (initdb refuses root).

const run = promisify(execFile);

export const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** Why a streaming-replica test cannot run here, or null when it can. */
export function replicaSkipReason(): string | null {
  if (!process.env.DATABASE_URL) return 'DATABASE_URL is not set (PostgreSQL tests run only against PostgreSQL)';
  for (const b of ['initdb', 'pg_ctl', 'pg_basebackup']) if (!existsSync(join(PG_BIN, b))) return `${join(PG_BIN, b)} not found (set PG_BIN)`;
  return null;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
    s.once('error', reject);
  });
}

export interface PgPair {
  primaryUrl: string;
  replicaUrl: string;
  /** SQL on the replica as superuser (pg_wal_replay_pause, ...). */
  stopReplica(): Promise<void>;
  startReplica(): Promise<void>;
  close(): Promise<void>;
}

export async function startPrimaryWithReplica(): Promise<PgPair> {
  const root = process.getuid?.() === 0;
  const dir = await mkdtemp(join(tmpdir(), 'obs-replica-'));
  let uid = 0;
  let gid = 0;
  if (root) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    uid = Number(stdout.trim());
    gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
    await chown(dir, uid, gid);
    await chmod(dir, 0o700);
  }
  const as = (bin: string, args: string[]) => (root ? run('runuser', ['-u', 'postgres', '--', join(PG_BIN, bin), ...args], { cwd: dir }) : run(join(PG_BIN, bin), args, { cwd: dir }));
  const [pp, rp] = [await freePort(), await freePort()];
  const primary = join(dir, 'primary');
  const replica = join(dir, 'replica');
  await as('initdb', ['-D', primary, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
  const common = `listen_addresses = '127.0.0.1'\nunix_socket_directories = '${dir}'\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\nshared_buffers = 32MB\nmax_connections = 60\n`;
  await appendFile(join(primary, 'postgresql.conf'), `${common}port = ${pp}\nwal_level = replica\nmax_wal_senders = 4\n`);
  await as('pg_ctl', ['-D', primary, '-l', join(dir, 'primary.log'), '-w', '-t', '120', 'start']);
  const stopPrimary = () => as('pg_ctl', ['-D', primary, '-m', 'immediate', '-w', 'stop']).catch(() => {});
  const startReplica = async () => void (await as('pg_ctl', ['-D', replica, '-l', join(dir, 'replica.log'), '-w', '-t', '120', 'start']));
  const stopReplica = async () => void (await as('pg_ctl', ['-D', replica, '-m', 'immediate', '-w', 'stop']).catch(() => {}));
  try {
    await as('pg_basebackup', ['-h', '127.0.0.1', '-p', String(pp), '-U', 'postgres', '-D', replica, '-R', '-X', 'stream', '--no-sync']);
    // The copy carries the primary's settings; the replica differs by its port.
    const conf = join(replica, 'postgresql.auto.conf');
    await appendFile(conf, `port = ${rp}\nhot_standby = on\n`);
    if (root) await chown(conf, uid, gid);
    await startReplica();
  } catch (err) {
    // Nothing left running or on disk when the pair cannot be built.
    await stopReplica();
    await stopPrimary();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    primaryUrl: `postgres://postgres@127.0.0.1:${pp}/postgres`,
    replicaUrl: `postgres://postgres@127.0.0.1:${rp}/postgres`,
    stopReplica,
    startReplica,
    async close() {
      await stopReplica();
      await stopPrimary();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
