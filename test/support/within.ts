/** Rejects with a recognisable error when `p` has not settled in `ms`: a hang becomes a failure, not a stuck run. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`HUNG: ${what} did not settle within ${ms} ms`)), ms);
    }),
  ]);
}
