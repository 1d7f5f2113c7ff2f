import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LAG_STATUSES, MIN_SAMPLES, STATUS_CODE, exitCodeFor, lagOf, partitionStatus, retainedSamples, worstStatus, type LagStatus, type OffsetSample } from '../../../src/lag/lag-status.js';

const W = { windowMs: 60_000, minSamples: MIN_SAMPLES };
const STEP = 10_000;

/** Samples every 10 s ending at `now` (the last one taken at `now`), from [committed, high] pairs. */
function series(pairs: [number, number][], now = 1_000_000): OffsetSample[] {
  return pairs.map(([committed, high], i) => ({ at: now - (pairs.length - 1 - i) * STEP, committed: BigInt(committed), high: BigInt(high) }));
}
const status = (pairs: [number, number][]) => partitionStatus(series(pairs), 1_000_000, W);

describe('status codes', () => {
  it('are the ones the alert rules compare with: OK 0, WARN 1, STALL 2, STOP 3, REWIND 4', () => {
    expect(STATUS_CODE).toEqual({ OK: 0, WARN: 1, STALL: 2, STOP: 3, REWIND: 4 });
  });
});

describe('lagOf', () => {
  it('is high watermark − committed, in BigInt, beyond 2^53', () => {
    expect(lagOf({ committed: 2n ** 60n, high: 2n ** 60n + 7n })).toBe(7n);
    expect(lagOf({ committed: 9_007_199_254_740_993n, high: 9_007_199_254_740_995n })).toBe(2n);
  });

  it('is never negative: a committed offset past the end is no lag', () => {
    expect(lagOf({ committed: 10n, high: 4n })).toBe(0n);
  });
});

describe('retainedSamples', () => {
  it('keeps the window and the newest sample older than it (the anchor)', () => {
    const s = series([[0, 1], [0, 2], [0, 3], [0, 4], [0, 5], [0, 6], [0, 7], [0, 8], [0, 9]]);
    const kept = retainedSamples(s, 1_000_000, W.windowMs);
    expect(kept.map((x) => x.high)).toEqual([2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
    expect(kept[0]!.at).toBe(1_000_000 - 70_000);
    expect(kept[1]!.at).toBe(1_000_000 - 60_000);
  });

  it('keeps the last sample when every one is older than the window', () => {
    expect(retainedSamples(series([[0, 1], [0, 2]], 0), 1_000_000, W.windowMs).map((x) => x.high)).toEqual([2n]);
  });

  it('keeps all when none is older than the window', () => {
    expect(retainedSamples(series([[0, 1], [0, 2]]), 1_000_000, W.windowMs)).toHaveLength(2);
  });
});

describe('partitionStatus', () => {
  it('OK: caught up, or lag that is consumed', () => {
    expect(status([[5, 5], [9, 9], [12, 12], [12, 12]])).toBe('OK');
    expect(status([[0, 10], [4, 12], [8, 13], [12, 14]])).toBe('OK');
  });

  it('OK while the window is not full enough: too few samples, or spanning less than half of it', () => {
    expect(status([[0, 5], [0, 9]])).toBe('OK');
    const shortSpan = [0, 1, 2].map((i) => ({ at: 1_000_000 - 20_000 + i * 10_000 - 1, committed: 0n, high: BigInt(5 + i) }));
    expect(partitionStatus(shortSpan, 1_000_000, W)).toBe('OK');
  });

  it('WARN: lag never falls across the window and ends higher, the committed offset moving', () => {
    expect(status([[0, 4], [1, 6], [2, 8], [3, 10]])).toBe('WARN');
    expect(status([[0, 4], [1, 5], [2, 6], [3, 8]])).toBe('WARN');
  });

  it('not WARN when lag falls once, or ends where it began', () => {
    expect(status([[0, 4], [1, 8], [6, 9], [7, 12]])).toBe('OK');
    expect(status([[0, 4], [1, 5], [2, 6], [3, 7]])).toBe('OK');
  });

  it('records arriving behind a consumer that stopped when it had caught up: WARN, then STALL after half a window with lag', () => {
    expect(status([[7, 7], [7, 7], [7, 8], [7, 9], [7, 12]])).toBe('WARN');
    expect(status([[7, 7], [7, 8], [7, 9], [7, 12], [7, 12]])).toBe('STALL');
  });

  it('STALL: the committed offset stands still with lag in every sample of the window', () => {
    expect(status([[3, 5], [3, 5], [3, 5], [3, 5]])).toBe('STALL');
    expect(status([[3, 5], [3, 9], [3, 12], [3, 20]])).toBe('STALL');
  });

  it('STOP: the same committed offset, with lag, at a sample older than the window and every one since', () => {
    expect(status([[3, 5], [3, 5], [3, 5], [3, 5], [3, 6], [3, 6], [3, 6], [3, 7]])).toBe('STOP');
  });

  it('not STOP when the anchor had no lag (a caught-up group need not commit): STALL once the window sees lag throughout', () => {
    expect(status([[3, 3], [3, 5], [3, 5], [3, 5], [3, 6], [3, 6], [3, 6], [3, 7]])).toBe('STALL');
  });

  it('judges how long the offset stood still from its last move: under half a window OK, from half a window STALL', () => {
    expect(status([[3, 9], [3, 9], [3, 9], [3, 9], [3, 9], [4, 9], [4, 9], [4, 9]])).toBe('OK');
    expect(status([[3, 9], [3, 9], [3, 9], [3, 9], [4, 9], [4, 9], [4, 9], [4, 9]])).toBe('STALL');
  });

  it('STALL needs MIN_SAMPLES stuck samples, not only the time', () => {
    const two: OffsetSample[] = [{ at: 1_000_000 - 40_000, committed: 3n, high: 5n }, { at: 1_000_000, committed: 3n, high: 5n }];
    expect(partitionStatus(two, 1_000_000, W)).toBe('OK');
  });

  it('STOP needs no full window: an anchor and one sample inside prove a whole window', () => {
    const samples: OffsetSample[] = [{ at: 1_000_000 - 70_000, committed: 3n, high: 5n }, { at: 1_000_000, committed: 3n, high: 5n }];
    expect(partitionStatus(samples, 1_000_000, W)).toBe('STOP');
  });

  it('a stuck partition goes OK → STALL (half a window) → STOP (more than a window)', () => {
    const all = series(Array.from({ length: 9 }, () => [3, 5] as [number, number]));
    const seen = all.map((s, i) => partitionStatus(all.slice(0, i + 1), s.at, W));
    expect(seen).toEqual(['OK', 'OK', 'OK', 'STALL', 'STALL', 'STALL', 'STALL', 'STOP', 'STOP']);
  });

  it('REWIND: a committed offset below the one before, while the later sample is in the window', () => {
    expect(status([[5, 9], [2, 9]])).toBe('REWIND');
    expect(status([[5, 9], [6, 9], [2, 9], [3, 9], [9, 9]])).toBe('REWIND');
  });

  it('REWIND ends once the step back has left the window', () => {
    const s = series([[5, 9], [2, 9], [3, 9], [4, 9], [5, 9], [6, 9], [7, 9], [9, 9], [9, 9]]);
    expect(partitionStatus(s, 1_000_000, W)).toBe('OK');
    expect(partitionStatus(s.slice(0, 8), s[7]!.at, W)).toBe('REWIND');
  });

  it('REWIND outranks everything else in a partition', () => {
    expect(status([[3, 5], [3, 5], [3, 5], [3, 5], [3, 6], [3, 6], [3, 6], [2, 7]])).toBe('REWIND');
  });

  it('a partition that never committed resumes from the low watermark: stuck at it with lag is STALL', () => {
    expect(status([[0, 8], [0, 8], [0, 8], [0, 8]])).toBe('STALL');
  });

  it('is OK for no samples', () => {
    expect(partitionStatus([], 1_000_000, W)).toBe('OK');
  });

  it('never STALL or STOP without lag, whatever the offsets (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.bigInt({ min: 0n, max: 2n ** 62n }), { minLength: 1, maxLength: 12 }), fc.integer({ min: 1, max: 30_000 }), (offsets, step) => {
        const samples = offsets.map((o, i) => ({ at: i * step, committed: o, high: o }));
        const s = partitionStatus(samples, samples[samples.length - 1]!.at, W);
        expect(['OK', 'REWIND']).toContain(s);
      }),
    );
  });

  it('is REWIND exactly when the window holds a step back, and otherwise OK when the offset always moves with lag falling (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 1_000 }), { minLength: 2, maxLength: 12 }), (committed) => {
        const samples = committed.map((c, i) => ({ at: i * STEP, committed: BigInt(c), high: 2_000n - BigInt(i) }));
        const now = samples[samples.length - 1]!.at;
        const kept = retainedSamples(samples, now, W.windowMs);
        const stepBack = kept.some((s, i) => i > 0 && s.committed < kept[i - 1]!.committed && s.at > now - W.windowMs);
        const s = partitionStatus(samples, now, W);
        if (stepBack) expect(s).toBe('REWIND');
        else expect(s).not.toBe('REWIND');
      }),
    );
  });
});

describe('worstStatus', () => {
  it('ranks STOP > STALL > REWIND > WARN > OK', () => {
    expect(worstStatus([])).toBe('OK');
    expect(worstStatus(['OK', 'WARN'])).toBe('WARN');
    expect(worstStatus(['WARN', 'REWIND'])).toBe('REWIND');
    expect(worstStatus(['REWIND', 'STALL', 'OK'])).toBe('STALL');
    expect(worstStatus(['STALL', 'STOP', 'REWIND'])).toBe('STOP');
  });

  it('is the same whatever the order (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...LAG_STATUSES)), (statuses: LagStatus[]) => {
        expect(worstStatus([...statuses].reverse())).toBe(worstStatus(statuses));
      }),
    );
  });
});

describe('exitCodeFor', () => {
  it('0 OK, 1 WARN, 2 STALL, STOP and REWIND', () => {
    expect(LAG_STATUSES.map((s) => [s, exitCodeFor(s)])).toEqual([
      ['OK', 0],
      ['WARN', 1],
      ['STALL', 2],
      ['STOP', 2],
      ['REWIND', 2],
    ]);
  });
});
