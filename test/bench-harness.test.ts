import { describe, expect, it } from 'vitest';
import { hostSpeedNote, QUIET_CEILING_CPU_US } from '../scripts/bench-harness.js';

// The sentence `npm run bench` puts above its table: whether the run's ratios can be held against
// the targets (a quiet host) or only its CPU per request (a slow one), from the bare GET ceilings.
describe('bench host-speed note', () => {
  it('calls a host quiet when the median bare GET ceiling costs at most QUIET_CEILING_CPU_US', () => {
    expect(hostSpeedNote([12.4, 11.9, 12.2])).toBe('Quiet host: the bare GET ceiling spent 12.2 µs of CPU per request (median of 3), within a quiet host\'s 12-18 µs.');
    expect(hostSpeedNote([QUIET_CEILING_CPU_US])).toMatch(/^Quiet host/);
  });

  it('calls it slow above that, by the median (one fast row does not make a quiet run)', () => {
    const note = hostSpeedNote([36.4, 12.0, 27.7]);
    expect(note).toMatch(/^\*\*Slow host\*\*: the bare GET ceiling spent 27\.7 µs of CPU per request \(median of 3\)/);
    expect(note).toContain('compare CPU per request');
    expect(hostSpeedNote([QUIET_CEILING_CPU_US + 0.1])).toMatch(/^\*\*Slow host/);
  });

  it('says so when no ceiling was measured (rows without CPU figures are ignored)', () => {
    expect(hostSpeedNote([])).toMatch(/^Host speed unknown/);
    expect(hostSpeedNote([NaN, 0])).toMatch(/^Host speed unknown/);
    expect(hostSpeedNote([NaN, 14])).toMatch(/^Quiet host: .* 14\.0 µs .*median of 1/);
  });
});
