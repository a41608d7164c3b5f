// Start-up under a low open-file limit: bounds how many modules Node reads at once
// (src/module-loading-hook.mjs explains why). Entry points call it before they import the rest of
// the service; modules already loaded are not affected.
import { register } from 'node:module';

let registered = false;

/** Registers the loading bound once per process. */
export function boundModuleLoading(): void {
  if (registered) return;
  registered = true;
  register('./module-loading-hook.mjs', import.meta.url);
}
