/** Collects the process warnings emitted from now on, as `name: message`, until stop(). */
export function collectWarnings(): { list: string[]; named(name: string): string[]; stop(): void } {
  const list: string[] = [];
  const onWarning = (w: Error) => list.push(`${w.name}: ${w.message}`);
  process.on('warning', onWarning);
  return {
    list,
    named: (name) => list.filter((w) => w.startsWith(`${name}:`)),
    stop: () => process.off('warning', onWarning),
  };
}
