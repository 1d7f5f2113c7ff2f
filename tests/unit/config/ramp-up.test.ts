import { describe, expect, it } from 'vitest';
import { MAX_RAMP_UP_MS, rampUpMs, rampUpShare, type RampUp } from '../../../src/config/ramp-up.js';
import { limitAtShare } from '../../../src/util/limit-share.js';

const ramp = (initialFraction: number, stepFraction: number, intervalMs = 1_000): RampUp => ({ initialFraction, stepFraction, intervalMs });

describe('rampUpShare', () => {
  it('is the whole cap without a ramp or without a known close', () => {
    expect(rampUpShare(undefined, 0)).toBe(1);
    expect(rampUpShare(undefined, undefined)).toBe(1);
    expect(rampUpShare(ramp(0.1, 0.1), undefined)).toBe(1);
  });

  it('starts at the initial fraction and grows one step per whole interval since the close', () => {
    const r = ramp(0.1, 0.2, 500);
    expect(rampUpShare(r, 0)).toBeCloseTo(0.1);
    expect(rampUpShare(r, 499)).toBeCloseTo(0.1);
    expect(rampUpShare(r, 500)).toBeCloseTo(0.3);
    expect(rampUpShare(r, 1_499)).toBeCloseTo(0.5);
    expect(rampUpShare(r, 2_000)).toBeCloseTo(0.9);
    expect(rampUpShare(r, 2_500)).toBe(1);
    expect(rampUpShare(r, 10 * 3_600_000)).toBe(1);
  });

  it('treats a close in the future (this clock behind Redis) as the close itself', () => {
    expect(rampUpShare(ramp(0.25, 0.25), -5_000)).toBe(0.25);
  });

  it('reaches exactly 1, not one binary rounding short of it', () => {
    expect(rampUpShare(ramp(0.1, 0.1), 9_000)).toBe(1);
    expect(rampUpShare(ramp(0.3, 0.1), 7_000)).toBe(1);
    expect(rampUpShare(ramp(1, 0.5), 0)).toBe(1);
  });

  it('never decreases with time and never exceeds 1, for every ramp in a grid', () => {
    for (const initial of [0.01, 0.05, 0.1, 0.3, 0.5, 1])
      for (const step of [0.01, 0.1, 0.25, 0.5, 1])
        for (const interval of [100, 1_000, 7_000]) {
          const r = ramp(initial, step, interval);
          let last = 0;
          for (let t = 0; t <= rampUpMs(r) + interval; t += interval / 4) {
            const share = rampUpShare(r, t);
            expect(share).toBeGreaterThanOrEqual(last);
            expect(share).toBeLessThanOrEqual(1);
            last = share;
          }
          expect(rampUpShare(r, rampUpMs(r))).toBe(1);
          if (rampUpMs(r) > 0) expect(rampUpShare(r, rampUpMs(r) - 1)).toBeLessThan(1);
        }
  });

  it('gives a cap of at least one call while ramping, through limitAtShare as permits-acquire.lua applies it', () => {
    const r = ramp(0.1, 0.1);
    expect([0, 1_000, 2_000, 4_500, 9_000].map((t) => limitAtShare(16, rampUpShare(r, t)))).toEqual([1, 3, 4, 8, 16]);
    expect(limitAtShare(3, rampUpShare(r, 0))).toBe(1);
    expect(limitAtShare(0, rampUpShare(r, 0))).toBe(0);
  });
});

describe('rampUpMs', () => {
  it('is the steps from the initial fraction to 1 times the interval', () => {
    expect(rampUpMs(ramp(0.1, 0.1))).toBe(9_000);
    expect(rampUpMs(ramp(0.1, 0.2, 500))).toBe(2_500);
    expect(rampUpMs(ramp(0.5, 1, 200))).toBe(200);
    expect(rampUpMs(ramp(1, 0.1))).toBe(0);
  });

  it('bounds what config accepts', () => {
    expect(rampUpMs(ramp(0.01, 0.001, 600_000))).toBeGreaterThan(MAX_RAMP_UP_MS);
  });
});
