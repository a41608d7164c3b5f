// V8 captures a stack trace for every Error made, walking up to Error.stackTraceLimit frames and
// keeping them: 10-30 µs on a slow host, more than the rest of a refusal's answer. A refusal of
// client input (a broken rule, a server nobody tracks) is expected: its message says what went
// wrong, and nobody reads where in our code it was made. A flood of refusals then costs what a
// flood of answers costs (docs/reliability.md "Look-ups of what does not exist, and refusals").

/** Runs `fn` with stack capture off: the errors made inside carry no stack. Synchronous code only. */
export function withoutStackTraces<T>(fn: () => T): T {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return fn();
  } finally {
    Error.stackTraceLimit = limit;
  }
}
