// Child process of test/rollup-aggregator.test.ts: runs ONE aggregator pass and SIGKILLs itself
// inside it, after the fold statement and before the watermark update (the worst moment).
// argv: <postgres url> | --pglite <data dir>
import { openPglite } from '../../src/db/pglite.js';
import { openPostgres } from '../../src/db/postgres.js';
import { rollupAggregator } from '../../src/store/rollup-aggregator.js';

const [a, b] = process.argv.slice(2);
const db = a === '--pglite' ? await openPglite(b!) : openPostgres(a!);
const agg = rollupAggregator(db, {
  afterFold: () => {
    process.stdout.write('folded\n');
    process.kill(process.pid, 'SIGKILL');
    return new Promise(() => {});
  },
});
await agg.pass();
process.stdout.write('the pass finished: the hook did not run\n');
process.exit(3);
