import { PGlite } from '@electric-sql/pglite';
const dir = process.argv[2];
if (process.argv[4]) process.umask(0o077);
const pg = await PGlite.create({ dataDir: dir });
await pg.exec("CREATE TABLE IF NOT EXISTS k (id int, j jsonb); INSERT INTO k VALUES (1, '{\"d\":\"SECRETSECRETSECRET123\"}')");
await pg.exec("UPDATE k SET j = '{\"x\":1}'");
if (process.argv[3] === '1') {
  try { await pg.exec("SET wal_recycle = off"); console.log('wal_recycle off ok'); } catch (e) { console.log('set failed', e.message); }
  await pg.exec("VACUUM FULL k"); await pg.exec("CHECKPOINT");
  for (let i = 0; i < 2; i++) { console.log((await pg.query("SELECT pg_switch_wal()")).rows); await pg.exec("CHECKPOINT"); }
}
console.log((await pg.query("SHOW wal_recycle")).rows, (await pg.query("SHOW wal_segment_size")).rows, (await pg.query("SHOW min_wal_size")).rows);
await pg.close();
