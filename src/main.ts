// First: the V8 settings of the serving process (src/runtime-flags.ts), before any other module runs.
import './runtime-flags.js';
import { boundModuleLoading } from './module-loading.js';

// Then the loading bound (src/module-loading-hook.mjs), so that the service's ~1,200 modules load
// under a low open-file limit: everything else is imported after it is in place.
boundModuleLoading();
const { serve, exitOnStartupError } = await import('./serve.js');
const { loadConfig } = await import('./config.js');

const isEntry = process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isEntry) {
  try {
    await serve(loadConfig());
  } catch (err) {
    exitOnStartupError(err);
  }
}
