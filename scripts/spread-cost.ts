// `npx tsx scripts/spread-cost.ts`: what an object literal costs on this Node when it spreads an
// object and then adds members (docs/performance.md "Object spread"), against Object.assign and
// against overriding members the spread already copied. Nanoseconds per object, best of 3.
function time(f: () => unknown, n = 100_000): number {
  let best = Infinity;
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 20_000; i++) f();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) f();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / n);
  }
  return best;
}
const claim = { gateway: { decision: 'allow', reason: 'pass' } };
const flat = { a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10 };
const none = (process.argv.length < 0 ? { z: 0 } : undefined) as Record<string, unknown> | undefined;
const rows: [string, () => unknown][] = [
  ['{ ...claim, 1 new member }', () => ({ ...claim, x: 1 })],
  ['{ ...claim, 3 new members }', () => ({ ...claim, x: 1, y: 2, z: 3 })],
  ['{ ...claim, 9 new members }', () => ({ ...claim, x: 1, y: 2, z: 3, u: 4, v: 5, w: 6, p: 7, q: 8, r: 9 })],
  ['Object.assign({}, claim, { 9 new members })', () => Object.assign({}, claim, { x: 1, y: 2, z: 3, u: 4, v: 5, w: 6, p: 7, q: 8, r: 9 })],
  ['{ ...undefined, 9 new members }', () => ({ ...none, x: 1, y: 2, z: 3, u: 4, v: 5, w: 6, p: 7, q: 8, r: 9 })],
  ['{ ...flat } (10 members, nothing added)', () => ({ ...flat })],
  ['{ ...flat, a: 0 } (an override)', () => ({ ...flat, a: 0 })],
  ['{ ...flat, 5 new members }', () => ({ ...flat, x: 1, y: 2, z: 3, u: 4, v: 5 })],
  ['{ x: 1, ...flat } (members before the spread)', () => ({ x: 1, ...flat })],
];
process.stdout.write(`node ${process.version}\n`);
for (const [name, f] of rows) process.stdout.write(`${name.padEnd(48)} ${time(f).toFixed(0).padStart(6)} ns\n`);
