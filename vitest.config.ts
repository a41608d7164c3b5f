import { defineConfig } from 'vitest/config';

// Budgets sized from measurements, not guesses (docs/reliability.md "Tests under load"). On this
// 2-core machine at load average 14-27 (other work running), single files measured: the slowest
// test under the default budget 47 s (telemetry-partitions migration), 38 s (cli.catalogue
// import + start), 26 s (config-lifecycle refusal, a spawned tsx process); the slowest hook (a
// test app on a fresh database plus seeding) well under a minute. Two full suites at once
// roughly double that, so the defaults leave about twice the doubled worst case. A timeout only
// fires on a hung test; it never decides a passing outcome.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 2,
    // With TEST_PROGRESS_FILE set (CI), every file and test begun is also logged there.
    reporters: process.env.TEST_PROGRESS_FILE ? ['default', './test/support/progress-reporter.ts'] : ['default'],
  },
});
