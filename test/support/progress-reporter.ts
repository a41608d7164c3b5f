import { appendFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Reporter, TestCase, TestModule } from 'vitest/node';

// A record of what the suite is doing, for a run that hangs (CI stops a test command that
// outlives its bound and prints the files that began and never ended, with the last test each
// began: .ci/run). Appends one line per event to TEST_PROGRESS_FILE; vitest.config.ts adds this
// reporter only when that variable is set.
const file = process.env.TEST_PROGRESS_FILE;

function write(what: string, moduleId: string, detail = ''): void {
  if (!file) return;
  appendFileSync(file, `${new Date().toISOString()}\t${what}\t${relative(process.cwd(), moduleId)}${detail ? `\t${detail}` : ''}\n`);
}

export default class ProgressReporter implements Reporter {
  onTestModuleStart(m: TestModule): void {
    write('start', m.moduleId);
  }
  onTestModuleEnd(m: TestModule): void {
    write('end', m.moduleId, m.state());
  }
  onTestCaseReady(t: TestCase): void {
    write('test', t.module.moduleId, t.fullName);
  }
}
