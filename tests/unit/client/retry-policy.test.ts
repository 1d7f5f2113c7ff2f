import { describe, expect, it } from 'vitest';
import { DEFAULT_RECONNECT, checkSubmitRetry, reconnectWaitMs, submitRetryWaitMs, type RefusedAttempt } from '../../../src/client/retry-policy.js';

const refused = (over: Partial<RefusedAttempt> = {}): RefusedAttempt => ({ attempt: 1, retryable: true, retryAfterSec: 2, waitedMs: 0, elapsedMs: 10, ...over });
const retry = { maxAttempts: 3, maxWaitMs: 10_000 };

describe('submitRetryWaitMs', () => {
  it("waits exactly the server's Retry-After", () => {
    expect(submitRetryWaitMs(refused(), retry, undefined)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ retryAfterSec: 0 }), retry, undefined)).toBe(0);
  });

  it('gives up after the last attempt; one attempt means no retry', () => {
    expect(submitRetryWaitMs(refused({ attempt: 2 }), retry, undefined)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ attempt: 3 }), retry, undefined)).toBeUndefined();
    expect(submitRetryWaitMs(refused(), { maxAttempts: 1, maxWaitMs: 60_000 }, undefined)).toBeUndefined();
  });

  it('retries only what Sluice calls retryable and says when to retry', () => {
    expect(submitRetryWaitMs(refused({ retryable: false }), retry, undefined)).toBeUndefined();
    expect(submitRetryWaitMs(refused({ retryAfterSec: undefined }), retry, undefined)).toBeUndefined();
  });

  it('keeps all the waits together within maxWaitMs, rather than waiting less than asked', () => {
    expect(submitRetryWaitMs(refused({ waitedMs: 8_000 }), retry, undefined)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ waitedMs: 8_001 }), retry, undefined)).toBeUndefined();
    expect(submitRetryWaitMs(refused({ retryAfterSec: 11 }), retry, undefined)).toBeUndefined();
  });

  it("does not retry into the run's deadline, counted from the first attempt", () => {
    expect(submitRetryWaitMs(refused({ elapsedMs: 500 }), retry, 3_000)).toBe(2_000);
    expect(submitRetryWaitMs(refused({ elapsedMs: 1_000 }), retry, 3_000)).toBeUndefined();
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

  it('doubles from the base up to the cap, and stops past the bound', () => {
    expect([1, 2, 3, 4, 5].map((n) => reconnectWaitMs(n, policy, undefined, undefined))).toEqual([100, 200, 400, 500, undefined]);
  });

  it("takes the server's retry: field as the base, and its Retry-After as a floor", () => {
    expect(reconnectWaitMs(2, policy, 50, undefined)).toBe(100);
    expect(reconnectWaitMs(1, policy, undefined, 3)).toBe(3_000);
  });

  it('reconnects a few times by default', () => {
    expect(reconnectWaitMs(DEFAULT_RECONNECT.maxReconnects, DEFAULT_RECONNECT, undefined, undefined)).toBeGreaterThan(0);
    expect(reconnectWaitMs(DEFAULT_RECONNECT.maxReconnects + 1, DEFAULT_RECONNECT, undefined, undefined)).toBeUndefined();
  });
});
