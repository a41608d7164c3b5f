#!/usr/bin/env node
// The `observatory` command: runs src/cli.ts through tsx (no build step needed).
import { register } from 'tsx/esm/api';

register();
// The loading bound of src/module-loading.ts, before the CLI's modules load.
const { boundModuleLoading } = await import('../src/module-loading.ts');
boundModuleLoading();
const { cliMain } = await import('../src/cli.ts');
await cliMain(process.argv.slice(2));
