// Summarises the Node.js diagnostic reports in a directory (written on a signal by processes of
// a hung CI step, see .ci/bounded.sh): per process its command line, where its JavaScript was
// (the main thread's stack at the signal, when it was running any) and the libuv handles keeping
// it alive.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
for (const f of readdirSync(dir).filter((n) => n.endsWith('.json')).sort()) {
  try {
    const r = JSON.parse(readFileSync(join(dir, f), 'utf8'));
    const h = r.header ?? {};
    console.log(`   process ${h.processId}: ${(h.commandLine ?? []).join(' ').slice(0, 200)}`);
    const stack = (r.javascriptStack?.stack ?? []).filter((l) => !/^\s*$/.test(l)).slice(0, 12);
    // Empty when the report was written from an idle event loop (the usual case: waiting on a handle).
    if (stack.length > 0) {
      console.log(`     JavaScript: ${r.javascriptStack?.message ?? ''}`);
      for (const l of stack) console.log(`       ${String(l).trim().slice(0, 200)}`);
    }
    const handles = (r.libuv ?? []).filter((x) => x.is_active && x.type !== 'loop');
    const counts = {};
    for (const x of handles) counts[x.type] = (counts[x.type] ?? 0) + 1;
    console.log(`     active handles: ${JSON.stringify(counts)}`);
    for (const x of handles.filter((x) => x.type === 'tcp' || x.type === 'pipe' || x.type === 'process' || x.type === 'timer').slice(0, 12)) {
      console.log(`       ${x.type} ${x.localEndpoint ? JSON.stringify(x.localEndpoint) : ''} ${x.remoteEndpoint ? '-> ' + JSON.stringify(x.remoteEndpoint) : ''}${x.type === 'timer' ? ` in ${x.firesInMsFromNow} ms${x.is_referenced ? '' : ' (unref)'}` : ''}${x.pid ? ` pid ${x.pid}` : ''}`.trimEnd());
    }
  } catch (err) {
    console.log(`   ${f}: unreadable (${err.message})`);
  }
}
