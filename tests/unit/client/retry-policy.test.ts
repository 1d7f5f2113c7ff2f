import { describe, expect, it } from 'vitest';
import { DEFAULT_RECONNECT, RETRY_SPREAD, checkSubmitRetry, reconnectWaitMs, submitRetryWaitMs, type RefusedAttempt } from '../../../src/client/retry-policy.js';

const refused = (over: Partial<RefusedAttempt> = {}): RefusedAttempt => ({ attempt: 1, retryable: true, retryAfterSec: 2, waitedMs: 0, elapsedMs: 10, ...over });
const retry = { maxAttempts: 3, maxWaitMs: 10_000 };
/** The least a random draw can give: no spread at all. */
const noSpread = () => 0;
const draw = (x: number) => () => x;

describe('submitRetryWaitMs', () => {
  it("waits the server's Retry-After when the draw adds nothing", () => {
    expect(submitRetryWaitMs(refused(), retry, undefined, noSpread)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ retryAfterSec: 0 }), retry, undefined, noSpread)).toBe(0);
  });

  it('gives up after the last attempt; one attempt means no retry', () => {
    expect(submitRetryWaitMs(refused({ attempt: 2 }), retry, undefined, noSpread)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ attempt: 3 }), retry, undefined, noSpread)).toBeUndefined();
    expect(submitRetryWaitMs(refused(), { maxAttempts: 1, maxWaitMs: 60_000 }, undefined, noSpread)).toBeUndefined();
  });

  it('retries only what Sluice calls retryable and says when to retry', () => {
    expect(submitRetryWaitMs(refused({ retryable: false }), retry, undefined, noSpread)).toBeUndefined();
    expect(submitRetryWaitMs(refused({ retryAfterSec: undefined }), retry, undefined, noSpread)).toBeUndefined();
  });

  it('keeps all the waits together within maxWaitMs, rather than waiting less than asked', () => {
    expect(submitRetryWaitMs(refused({ waitedMs: 8_000 }), retry, undefined, noSpread)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ waitedMs: 8_001 }), retry, undefined, noSpread)).toBeUndefined();
    expect(submitRetryWaitMs(refused({ retryAfterSec: 11 }), retry, undefined, noSpread)).toBeUndefined();
  });

  it("does not retry into the run's deadline, counted from the first attempt", () => {
    expect(submitRetryWaitMs(refused({ elapsedMs: 500 }), retry, 3_000, noSpread)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ elapsedMs: 1_000 }), retry, 3_000, noSpread)).toBeUndefined();
  });

  it('spreads the wait over up to half as long again as Retry-After, never less', () => {
    expect(submitRetryWaitMs(refused(), retry, undefined, draw(0.5))).toBe(2_500);
    expect(submitRetryWaitMs(refused(), retry, undefined, draw(0.999))).toBeCloseTo(2_999, 0);
    expect(RETRY_SPREAD).toBe(0.5);
  });

  it('spreads a hundred clients refused together over the whole range instead of one instant', () => {
    const waits = Array.from({ length: 100 }, (_, i) => submitRetryWaitMs(refused(), retry, undefined, draw(i / 100))!);
    expect(Math.min(...waits)).toBe(2_000);
    expect(Math.max(...waits)).toBeCloseTo(2_990, 0);
    expect(new Set(waits).size).toBe(100);
  });

  it('shrinks the spread, not the floor, to fit the wait budget and the deadline', () => {
    expect(submitRetryWaitMs(refused({ waitedMs: 7_500 }), retry, undefined, draw(0.999))).toBe(2_500);
    expect(submitRetryWaitMs(refused({ waitedMs: 8_000 }), retry, undefined, draw(0.999))).toBe(2_000);
    expect(submitRetryWaitMs(refused({ elapsedMs: 500 }), retry, 3_000, draw(0.999))).toBe(2_499);
  });
});

describe('checkSubmitRetry', () => {
  it('accepts whole attempts from 1 and a non-negative wait budget', () => {
    expect(checkSubmitRetry({ maxAttempts: 1, maxWaitMs: 0 })).toEqual({ maxAttempts: 1, maxWaitMs: 0 });
    for (const bad of [{ maxAttempts: 0, maxWaitMs: 0 }, { maxAttempts: 1.5, maxWaitMs: 0 }, { maxAttempts: 2, maxWaitMs: -1 }, { maxAttempts: 2, maxWaitMs: Number.NaN }]) {
      expect(() => checkSubmitRetry(bad)).toThrow(RangeError);
    }
  });
});

describe('reconnectWaitMs', () => {
  const policy = { maxReconnects: 4, baseDelayMs: 100, maxDelayMs: 500 };
  const full = draw(1);

  it('doubles from the base up to the cap, and stops past the bound', () => {
    expect([1, 2, 3, 4, 5].map((n) => reconnectWaitMs(n, policy, undefined, undefined, full))).toEqual([100, 200, 400, 500, undefined]);
  });

  it('spreads each backoff over its upper half', () => {
    expect([1, 2, 3, 4].map((n) => reconnectWaitMs(n, policy, undefined, undefined, noSpread))).toEqual([50, 100, 200, 250]);
    expect(reconnectWaitMs(3, policy, undefined, undefined, draw(0.5))).toBe(300);
  });

  it("takes the server's retry: field as the base, and its Retry-After as a floor, spread as a submission's", () => {
    expect(reconnectWaitMs(2, policy, 50, undefined, full)).toBe(100);
    expect(reconnectWaitMs(1, policy, undefined, 3, noSpread)).toBe(3_000);
    expect(reconnectWaitMs(1, policy, undefined, 3, draw(0.5))).toBe(3_750);
  });

  it('reconnects a few times by default', () => {
    expect(reconnectWaitMs(DEFAULT_RECONNECT.maxReconnects, DEFAULT_RECONNECT, undefined, undefined, full)).toBeGreaterThan(0);
    expect(reconnectWaitMs(DEFAULT_RECONNECT.maxReconnects + 1, DEFAULT_RECONNECT, undefined, undefined, full)).toBeUndefined();
  });
});
