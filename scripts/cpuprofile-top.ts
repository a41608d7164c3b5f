// `npx tsx scripts/cpuprofile-top.ts <file.cpuprofile> [n]`: the functions with the most self
// time in a V8 CPU profile (as written by `node --cpu-prof`, e.g. `npm run bench -- --profile`),
// plus the share of idle time and a per-package rollup. No dependencies, no browser needed.
// `... <file.cpuprofile> --stack <text> [--stack <text> ...]`: for each text, the share of the busy
// samples with a frame whose function name or file contains it anywhere on the stack (inclusive
// time: that function and all it calls), e.g. `--stack parseReport --stack node_modules/pg/`.
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

/** A profile's nodes by id, each node's parent, and each node's self time (µs). */
function readProfile(file: string): { byId: Map<number, Node>; parent: Map<number, number>; self: Map<number, number> } {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0));
  return { byId, parent, self };
}

export function summarize(file: string, top = 25): string {
  const { byId, parent, self } = readProfile(file);
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fn = new Map<string, number>();
  const pkg = new Map<string, number>();
  for (const [id, t] of self) {
    const n = byId.get(id)!;
    const url = n.callFrame.url.replace(/^file:\/\//, '').replace(process.cwd() + '/', '');
    const key = `${n.callFrame.functionName || '(anonymous)'} ${url ? `${url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}` : ''}`.trim();
    fn.set(key, (fn.get(key) ?? 0) + t);
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
    const group = m ? m[1]! : url.startsWith('src/') ? 'ours: src/' + url.split('/')[1] : url === '' ? n.callFrame.functionName || '(native)' : url.startsWith('node:') ? 'node core' : 'other';
    pkg.set(group, (pkg.get(group) ?? 0) + t);
  }
  const pct = (t: number) => `${((t / total) * 100).toFixed(1).padStart(5)}%`;
  // Inclusive: samples with a frame of our code (src/) anywhere on the stack, i.e. the time spent
  // in our code and in whatever it called (node, pg, jose...), next to the rest (node's HTTP
  // machinery, fastify, the libraries' own callbacks, idle).
  const oursOnStack = new Map<number, boolean>();
  const isOurs = (id: number): boolean => {
    const known = oursOnStack.get(id);
    if (known !== undefined) return known;
    const n = byId.get(id)!;
    const url = n.callFrame.url.replace(/^file:\/\//, '').replace(process.cwd() + '/', '');
    const up = parent.get(id);
    const v = url.startsWith('src/') || (up !== undefined && isOurs(up));
    oursOnStack.set(id, v);
    return v;
  };
  let inclusive = 0;
  let idle = 0;
  for (const [id, t] of self) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') idle += t;
    else if (isOurs(id)) inclusive += t;
  }
  const lines = [
    `${file}: ${(total / 1e6).toFixed(1)} s sampled`,
    `our code on the stack (inclusive of what it calls): ${pct(inclusive).trim()} of samples, ${((inclusive / Math.max(1, total - idle)) * 100).toFixed(1)}% of the busy ones`,
    '',
    'self time by package / area:',
  ];
  for (const [k, t] of [...pkg].sort((a, b) => b[1] - a[1]).slice(0, 15)) lines.push(`${pct(t)}  ${k}`);
  lines.push('', `top ${top} functions by self time:`);
  for (const [k, t] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(t)}  ${k}`);
  return lines.join('\n');
}

/** Share of busy samples (idle excluded) with a frame matching each pattern anywhere on the stack. */
export function stackShares(file: string, patterns: readonly string[]): string {
  const { byId, parent, self } = readProfile(file);
  let busy = 0;
  for (const [id, t] of self) if (byId.get(id)!.callFrame.functionName !== '(idle)') busy += t;
  return patterns
    .map((pattern) => {
      let t = 0;
      for (const [id, dt] of self) {
        for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
          const f = byId.get(cur)!.callFrame;
          if (f.functionName === '(idle)') break;
          if (f.functionName.includes(pattern) || f.url.includes(pattern)) {
            t += dt;
            break;
          }
        }
      }
      return `${((t / Math.max(1, busy)) * 100).toFixed(1).padStart(5)}%  ${pattern}`;
    })
    .join('\n');
}

const isEntry = process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isEntry) {
  const args = process.argv.slice(2);
  const patterns: string[] = [];
  for (let i = args.indexOf('--stack'); i >= 0; i = args.indexOf('--stack')) {
    if (args[i + 1] === undefined) {
      console.error('--stack needs a text to look for');
      process.exit(2);
    }
    patterns.push(args[i + 1]!);
    args.splice(i, 2);
  }
  const [file, n] = args;
  if (!file) {
    console.error('usage: tsx scripts/cpuprofile-top.ts <file.cpuprofile> [top-n] | <file.cpuprofile> --stack <text> [--stack <text> ...]');
    process.exit(2);
  }
  if (patterns.length > 0) console.log(`share of the busy samples with a matching frame on the stack:\n${stackShares(file, patterns)}`);
  else console.log(summarize(file, n ? Number(n) : 25));
}
