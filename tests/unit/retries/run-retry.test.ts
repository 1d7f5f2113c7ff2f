import { describe, expect, it } from 'vitest';
import type { RetryPolicy } from '../../../src/retries/retry-policy.js';
import { breakerRetryAt, deferredStepRetryAt, RETRY_TOPIC_MARGIN_MS, transientRetryAt } from '../../../src/retries/run-retry.js';

const policy: RetryPolicy = { maxAttempts: 3, baseMs: 500, capMs: 2_000 };
const base = { policy, now: 1_000, deadline: 60_000, minCallMs: 100, random: () => 0.5 };

describe('transientRetryAt', () => {
  it('backs off with full jitter on the failures so far, this one included', () => {
    expect(transientRetryAt({ ...base, priorFailures: 0 })).toBe(1_500);
    expect(transientRetryAt({ ...base, priorFailures: 1 })).toBe(2_000);
  });

  it('gives up once the run has used its attempts', () => {
    expect(transientRetryAt({ ...base, priorFailures: 2 })).toBeUndefined();
    expect(transientRetryAt({ ...base, priorFailures: 0, policy: { ...policy, maxAttempts: 1 } })).toBeUndefined();
  });

  it('is never due at once: a zero jitter still waits a millisecond', () => {
    expect(transientRetryAt({ ...base, priorFailures: 0, random: () => 0 })).toBe(1_001);
  });

  it('gives up when the trip through the retry topic could leave no time for a useful call before the deadline', () => {
    expect(transientRetryAt({ ...base, priorFailures: 0, deadline: 1_600 + RETRY_TOPIC_MARGIN_MS })).toBeUndefined();
    expect(transientRetryAt({ ...base, priorFailures: 0, deadline: 1_601 + RETRY_TOPIC_MARGIN_MS })).toBe(1_500);
  });
});

describe('deferredStepRetryAt', () => {
  const deferred = { policy, dueAt: 5_000, deadline: 60_000, minCallMs: 100 };

  it('comes back at the step retry\'s own due time while the run has attempts left', () => {
    expect(deferredStepRetryAt({ ...deferred, priorFailures: 0 })).toBe(5_000);
    expect(deferredStepRetryAt({ ...deferred, priorFailures: 1 })).toBe(5_000);
  });

  it('counts as a failed attempt: gives up once the run has used its attempts', () => {
    expect(deferredStepRetryAt({ ...deferred, priorFailures: 2 })).toBeUndefined();
  });

  it('gives up when the trip through the retry topic could leave no time for a useful call', () => {
    expect(deferredStepRetryAt({ ...deferred, priorFailures: 0, deadline: 5_000 + RETRY_TOPIC_MARGIN_MS + 100 })).toBeUndefined();
    expect(deferredStepRetryAt({ ...deferred, priorFailures: 0, deadline: 5_001 + RETRY_TOPIC_MARGIN_MS + 100 })).toBe(5_000);
  });
});

describe('breakerRetryAt', () => {
  const at = { until: 10_000, deadline: 60_000, random: () => 0.5 };

  it("spreads waiters over part of the breaker's open time, at most two seconds", () => {
    expect(breakerRetryAt({ ...at, openMs: 30_000 })).toBe(11_000);
    expect(breakerRetryAt({ ...at, openMs: 500 })).toBe(10_250);
    expect(breakerRetryAt({ ...at, openMs: 30_000, random: () => 0 })).toBe(10_000);
  });

  it('does not spread for a dependency no longer configured, and draws no random number for it', () => {
    let draws = 0;
    expect(breakerRetryAt({ ...at, openMs: undefined, random: () => ++draws })).toBe(10_000);
    expect(draws).toBe(0);
  });

  it('is never due after the deadline', () => {
    expect(breakerRetryAt({ ...at, openMs: 30_000, deadline: 10_400 })).toBe(10_400);
  });
});
