// Types of src/module-loading-hook.mjs (plain JavaScript: it runs on Node's loader thread).
import type { LoadHook } from 'node:module';

export declare const MAX_LOADS_AT_ONCE: number;
export declare const load: LoadHook;
