import { describe, expect, it } from 'vitest';
import { fullJitterMs, nextRetryDelay, type RetryPolicy } from '../../../src/retries/retry-policy.js';
import { StepError } from '../../../src/steps/step-error.js';

const policy: RetryPolicy = { maxAttempts: 3, baseMs: 500, capMs: 2_000 };
const retryable = (retryAfterSec?: number) => new StepError('http_status', 'anthropic', 'HTTP 529', true, 529, retryAfterSec);
const base = { policy, now: 0, deadline: 60_000, minCallMs: 100, random: () => 0.5 };

describe('fullJitterMs', () => {
  it('waits a random part of base · 2^retry, capped', () => {
    expect(fullJitterMs(0, policy, () => 0.5)).toBe(250);
    expect(fullJitterMs(1, policy, () => 0.5)).toBe(500);
    expect(fullJitterMs(2, policy, () => 0.5)).toBe(1_000);
    expect(fullJitterMs(10, policy, () => 0.5)).toBe(1_000); // capped at 2 s, half of it
  });

  it('stays within [0, ceiling) for the extremes of the random source', () => {
    expect(fullJitterMs(3, policy, () => 0)).toBe(0);
    expect(fullJitterMs(3, policy, () => 0.999999)).toBe(1_999);
    expect(fullJitterMs(-1, policy, () => 0.5)).toBe(250);
  });
});

describe('nextRetryDelay', () => {
  it('retries a retryable error with a jittered wait until the attempts are used up', () => {
    expect(nextRetryDelay({ ...base, error: retryable(), attempt: 1 })).toBe(250);
    expect(nextRetryDelay({ ...base, error: retryable(), attempt: 2 })).toBe(500);
    expect(nextRetryDelay({ ...base, error: retryable(), attempt: 3 })).toBeUndefined();
  });

  it('never retries what cannot succeed', () => {
    const badRequest = new StepError('http_status', 'anthropic', 'HTTP 400', false, 400);
    expect(nextRetryDelay({ ...base, error: badRequest, attempt: 1 })).toBeUndefined();
  });

  it('honours retry-after as a floor under the jitter', () => {
    expect(nextRetryDelay({ ...base, error: retryable(3), attempt: 1 })).toBe(3_000);
    expect(nextRetryDelay({ ...base, error: retryable(0), attempt: 1 })).toBe(250);
  });

  it('does not start a retry that cannot end before the deadline', () => {
    expect(nextRetryDelay({ ...base, error: retryable(), attempt: 1, deadline: 349 })).toBeUndefined();
    expect(nextRetryDelay({ ...base, error: retryable(), attempt: 1, deadline: 350 })).toBe(250);
    expect(nextRetryDelay({ ...base, error: retryable(30), attempt: 1, deadline: 20_000 })).toBeUndefined();
  });

  it('a policy of one attempt never retries', () => {
    expect(nextRetryDelay({ ...base, policy: { ...policy, maxAttempts: 1 }, error: retryable(), attempt: 1 })).toBeUndefined();
  });
});
