import { describe, expect, it } from 'vitest';
import { estimateWrittenAt, timeLag } from '../../../src/lag/time-lag.js';

/** High watermarks sampled at 0, 10, 20 s: 10 records, then 30 more, then none. */
const samples = [
  { at: 0, high: 10n },
  { at: 10_000, high: 40n },
  { at: 20_000, high: 40n },
];

describe('estimateWrittenAt', () => {
  it('places a record between the samples its high watermark crossed, at an even rate', () => {
    // Offsets 10..39 were written between 0 s and 10 s: offset 10 after the first third of a record's time.
    expect(estimateWrittenAt(samples, 10n)).toBeCloseTo(10_000 / 30, 6);
    expect(estimateWrittenAt(samples, 24n)).toBeCloseTo(5_000, 6);
    expect(estimateWrittenAt(samples, 39n)).toBe(10_000);
  });

  it('gives the oldest sample time for a record written before it (a lower bound on its age)', () => {
    expect(estimateWrittenAt(samples, 0n)).toBe(0);
    expect(estimateWrittenAt(samples, 9n)).toBe(0);
  });

  it('is undefined for a record not written yet', () => {
    expect(estimateWrittenAt(samples, 40n)).toBeUndefined();
    expect(estimateWrittenAt([], 0n)).toBeUndefined();
  });

  it('works on offsets beyond 2^53 (BigInt differences)', () => {
    const base = 2n ** 62n;
    expect(estimateWrittenAt([{ at: 0, high: base }, { at: 1_000, high: base + 4n }], base + 1n)).toBe(500);
  });
});

describe('timeLag', () => {
  it('is 0 s without lag, whatever else is known', () => {
    expect(timeLag({ committed: 40n, high: 40n }, 5, samples, 60_000)).toEqual({ seconds: 0, source: 'caught-up' });
  });

  it('is now − the record timestamp when the record was read', () => {
    expect(timeLag({ committed: 24n, high: 40n }, 12_500, samples, 60_000)).toEqual({ seconds: 47.5, source: 'record' });
  });

  it('is never negative (a broker clock ahead of ours)', () => {
    expect(timeLag({ committed: 24n, high: 40n }, 61_000, samples, 60_000)).toEqual({ seconds: 0, source: 'record' });
  });

  it('is interpolated from the samples when the record could not be read', () => {
    expect(timeLag({ committed: 24n, high: 40n }, undefined, samples, 60_000)).toEqual({ seconds: 55, source: 'interpolated' });
  });

  it('interpolated for a record older than the window: the oldest sample bounds it from below', () => {
    expect(timeLag({ committed: 2n, high: 40n }, undefined, samples, 60_000)).toEqual({ seconds: 60, source: 'interpolated' });
  });

  it('interpolated with no sample that saw the record written: 0 s, nothing older is known', () => {
    expect(timeLag({ committed: 3n, high: 9n }, undefined, [], 60_000)).toEqual({ seconds: 0, source: 'interpolated' });
  });
});
