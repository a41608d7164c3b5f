// A process that opens the embedded database on a data directory and holds it: what `npm start`
// does. Prints "open" or "busy: <message>" and, when open, holds it for argv[3] ms before
// closing. With argv[4] = "lock", it takes only the lock (lockDataDir, stale after argv[5] ms).
import { openPglite, DataDirBusyError } from '../../src/db/pglite.js';
import { lockDataDir } from '../../src/db/data-dir-lock.js';

const [dir, holdMs, mode, staleMs] = process.argv.slice(2);
try {
  let release: () => Promise<void> | void;
  if (mode === 'lock') {
    release = await lockDataDir(dir!, { staleMs: Number(staleMs), heartbeatMs: 100 });
  } else {
    const db = await openPglite(dir!);
    release = () => db.close();
  }
  console.log('open');
  await new Promise((r) => setTimeout(r, Number(holdMs)));
  await release();
} catch (err) {
  if (!(err instanceof DataDirBusyError)) throw err;
  console.log(`busy: ${err.message}`);
}
