import { describe, expect, it } from 'vitest';
import { isRfc3339 } from '../src/domain/rfc3339.js';

// RFC 3339 date-times read from outside name a real time, or are refused: Date rolls fields over
// (2020-02-30 reads as 1 March), so the syntax alone would let a time that does not exist be read
// as another one (A2A statusTimestampAfter, an MCP Registry's updatedAt, --updated-since).
describe('isRfc3339', () => {
  it('accepts real times, with fractions, offsets, lower-case t and z, leap days and the first and last years', () => {
    for (const v of ['2026-01-31T12:00:00Z', '2025-10-21T09:14:03.412918Z', '2024-02-29T23:59:59-05:00', '2000-02-29T00:00:00+14:00', '2026-12-31t23:59:59.999999999z', '0001-01-01T00:00:00Z', '9999-12-31T23:59:59Z', '0099-03-01T00:00:00Z']) {
      expect(isRfc3339(v), v).toBe(true);
    }
  });

  it('refuses fields that name no time, which Date would roll over', () => {
    for (const v of ['2020-02-30T00:00:00Z', '2021-02-29T12:00:00Z', '1900-02-29T00:00:00Z', '2020-04-31T00:00:00Z', '2020-13-01T00:00:00Z', '2020-00-10T00:00:00Z', '2020-01-00T00:00:00Z', '2020-01-01T24:00:00Z', '2020-01-01T00:60:00Z', '2020-01-01T00:00:60Z', '2020-01-01T00:00:00+24:00', '2020-01-01T00:00:00-01:60']) {
      expect(isRfc3339(v), v).toBe(false);
    }
  });

  it('refuses what is not the syntax', () => {
    for (const v of ['', '2020-01-01', '2020-01-01 00:00:00Z', '2020-01-01T00:00:00', '20200101T000000Z', '2020-01-01T00:00:00.Z', '2020-01-01T00:00:00.1234567890Z', '+02020-01-01T00:00:00Z', '2020-01-01T00:00:00Z\n']) {
      expect(isRfc3339(v), JSON.stringify(v)).toBe(false);
    }
  });
});
