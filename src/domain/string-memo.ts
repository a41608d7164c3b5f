// A pure string function's answers, remembered (the hot paths ask the same few questions again and
// again: a server URL, a client address). Bounded whatever clients send: at most `maxEntries`
// answers, the oldest dropped first, and only for inputs and answers of at most `maxLength`
// characters. A call that throws is not remembered: it throws again next time.

export interface StringMemo {
  (input: string): string;
  /** How many answers are remembered (tests hold the bound). */
  readonly size: () => number;
}

export function stringMemo(compute: (input: string) => string, opts: { maxEntries: number; maxLength: number }): StringMemo {
  const memo = new Map<string, string>();
  const remembered = (input: string): string => {
    const known = memo.get(input);
    if (known !== undefined) return known;
    const answer = compute(input);
    if (input.length <= opts.maxLength && answer.length <= opts.maxLength) {
      if (memo.size >= opts.maxEntries) memo.delete(memo.keys().next().value!);
      memo.set(input, answer);
    }
    return answer;
  };
  return Object.assign(remembered, { size: () => memo.size });
}
