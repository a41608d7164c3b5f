// RFC 3339 date-times read from outside (A2A's statusTimestampAfter, an MCP Registry's
// updatedAt, the CLI's --updated-since). The syntax alone is not enough: JavaScript's Date rolls
// fields over instead of refusing them (2020-02-30 reads as 1 March, hour 24 as the next day), so
// a time that does not exist would silently be read as another one.

const SYNTAX = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-](\d{2}):(\d{2}))$/i;

/**
 * True when `v` is an RFC 3339 date-time whose fields name a real time: a month of 1-12, a day
 * that month has in that year, hours 0-23, minutes and seconds 0-59 (a leap second is refused:
 * Date cannot hold it), an offset of at most 23:59.
 */
export function isRfc3339(v: string): boolean {
  const m = SYNTAX.exec(v);
  if (!m) return false;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (m[7] !== undefined && (Number(m[7]) > 23 || Number(m[8]) > 59)) return false;
  // Built in a leap year, then moved to its own: Date.UTC reads years 0-99 as 1900-1999.
  const t = new Date(Date.UTC(2000, mo - 1, d, h, mi, s));
  t.setUTCFullYear(y);
  return t.getUTCFullYear() === y && t.getUTCMonth() === mo - 1 && t.getUTCDate() === d && t.getUTCHours() === h && t.getUTCMinutes() === mi && t.getUTCSeconds() === s;
}
