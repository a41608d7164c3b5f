// Number and time formatting for the pages (presentation only; the figures come from services).

export const fmtInt = (n: number | bigint | undefined | null) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
export const fmtScore = (n: number | undefined | null) => (n === undefined || n === null ? '–' : n.toFixed(1));
export const fmtPct = (r: number | undefined | null, digits = 1) => (r === undefined || r === null ? '–' : `${(r * 100).toFixed(digits)}%`);
export const fmtMs = (n: number | undefined | null) => (n === undefined || n === null ? '–' : `${Math.round(n).toLocaleString('en-US')} ms`);
export const fmtDelta = (d: number) => `${d > 0 ? '+' : ''}${d.toFixed(1)}`;

/** "2026-11-25 21:04 UTC": unambiguous and the same for every reader. */
export function fmtTime(t: Date | string | undefined | null): string {
  if (!t) return '–';
  const d = typeof t === 'string' ? new Date(t) : t;
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
