// V8 settings of the serving process, applied when this module is first imported: main.ts imports
// it before anything else, so they hold before any of the service's code runs.
//
// Allocation-site pretenuring off. V8 watches how many objects of each allocation site survive a
// young-generation collection; a site whose objects survive often enough is switched to allocate
// in the old generation from then on. In this service that decision is a coin toss made during
// start-up and the first seconds of load (a migration, a burst of reports waiting on a commit),
// and it sticks for the life of the process: a process that switched the sites of its per-request
// objects (answers, headers, promise chains that live a millisecond) fills the old generation with
// garbage at tens of MB/s, runs a full collection every few seconds, and pays for every young
// collection the pointers from old to young objects. Measured on the same code (docs/performance.md
// "Fifth pass"): of freshly started processes under the same load, about half ran a cached trust
// read at 18-22 µs of CPU and the others at 28-32 µs for their whole life, pre-flight and gate
// decisions alike (26-29 against 38-42 µs); with pretenuring off every process ran at the fast
// figure. Long-lived objects still reach the old generation the usual way, by surviving two young
// collections.
import { setFlagsFromString } from 'node:v8';

/** The V8 flags set here, as `node --v8-options` names them (test/runtime-flags.test.ts checks they exist). */
export const SERVICE_V8_FLAGS = ['--no-allocation-site-pretenuring'] as const;

for (const flag of SERVICE_V8_FLAGS) setFlagsFromString(flag);
