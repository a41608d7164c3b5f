// `npm run demo`: the same as `observatory demo` (src/cli/demo.ts).
import { cliMain } from '../src/cli.js';

await cliMain(['demo']);
