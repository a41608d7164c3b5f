// Preloaded (`node --import`) into a service process by test/hot-path-names.test.ts: counts the
// functions given a name with Object.defineProperty(fn, 'name', ...) — what tsx's keepNames
// (esbuild's __name) does each time a named closure is created — between two SIGUSR2 signals,
// and writes them to stderr as one line: `FUNCTION-NAMES {"name":count,...}`.
const define = Object.defineProperty;
let counts = null;
Object.defineProperty = function (target, key, descriptor) {
  if (counts !== null && key === 'name' && typeof target === 'function') {
    const name = String(descriptor?.value ?? '?');
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return define(target, key, descriptor);
};
process.on('SIGUSR2', () => {
  if (counts === null) {
    counts = {};
    process.stderr.write('FUNCTION-NAMES-ON\n');
    return;
  }
  process.stderr.write(`FUNCTION-NAMES ${JSON.stringify(counts)}\n`);
  counts = null;
});
