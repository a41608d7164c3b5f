#!/usr/bin/env node
// The `observatory` command: runs src/cli.ts through tsx (no build step needed).
import { register } from 'tsx/esm/api';

register();
const { cliMain } = await import('../src/cli.ts');
await cliMain(process.argv.slice(2));
