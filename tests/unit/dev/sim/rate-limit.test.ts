import { describe, expect, it } from 'vitest';
import {
  MINUTE_MS,
  RateBucket,
  SECOND_MS,
  TargetRateLimits,
  anthropicRateLimitHeaders,
  describeRefusal,
  toolRateLimitHeaders,
  type Admission,
  type CallCost,
} from '../../../../src/dev/sim/rate-limit.js';

/** 2026-12-01T00:00:00Z: a whole second, so reset times are easy to read. */
const T0 = Date.UTC(2026, 11, 1);

function cost(fields: Partial<CallCost> = {}): CallCost {
  return { requests: 1, inputTokens: 0, outputTokens: 0, ...fields };
}

function refusal(admission: Admission): Extract<Admission, { ok: false }> {
  if (admission.ok) throw new Error('expected a refusal');
  return admission;
}

describe('RateBucket', () => {
  it('starts full and refills continuously at exactly capacity per window', () => {
    const bucket = new RateBucket(60, MINUTE_MS, T0);
    expect(bucket.remaining(T0)).toBe(60);
    bucket.take(60, T0);
    expect(bucket.remaining(T0)).toBe(0);
    expect(bucket.available(T0 + 500)).toBe(0.5);
    expect(bucket.remaining(T0 + 999)).toBe(0);
    expect(bucket.remaining(T0 + 1_000)).toBe(1);
    expect(bucket.remaining(T0 + 30_000)).toBe(30);
    expect(bucket.remaining(T0 + 60_000)).toBe(60);
    // Full is full: waiting longer adds nothing.
    expect(bucket.remaining(T0 + 600_000)).toBe(60);
  });

  it('says when it is full again', () => {
    const bucket = new RateBucket(1_000, MINUTE_MS, T0);
    expect(bucket.fullAt(T0)).toBe(T0);
    bucket.take(250, T0);
    expect(bucket.fullAt(T0)).toBe(T0 + 15_000);
    expect(bucket.fullAt(T0 + 5_000)).toBe(T0 + 15_000);
    expect(bucket.fullAt(T0 + 20_000)).toBe(T0 + 20_000);
  });

  it('covers a cost up to what it holds, fractions included', () => {
    const bucket = new RateBucket(60, MINUTE_MS, T0);
    bucket.take(59.5, T0);
    expect(bucket.covers(0.5, T0)).toBe(true);
    expect(bucket.covers(1, T0)).toBe(false);
    expect(bucket.covers(1, T0 + 499)).toBe(false);
    expect(bucket.covers(1, T0 + 500)).toBe(true);
  });

  it('computes the exact wait until a cost is covered', () => {
    const bucket = new RateBucket(1_000, MINUTE_MS, T0);
    expect(bucket.waitMs(1_000, T0)).toBe(0);
    bucket.take(1_000, T0);
    expect(bucket.waitMs(1, T0)).toBe(60);
    expect(bucket.waitMs(500, T0)).toBe(30_000);
    expect(bucket.waitMs(500, T0 + 10)).toBe(29_990);
    expect(bucket.waitMs(500, T0 + 30_000)).toBe(0);
  });

  it('makes a cost above the capacity wait for a full bucket, and no more', () => {
    const bucket = new RateBucket(100, MINUTE_MS, T0);
    bucket.take(50, T0);
    expect(bucket.waitMs(500, T0)).toBe(30_000);
    expect(bucket.waitMs(500, T0 + 30_000)).toBe(0);
    expect(bucket.covers(500, T0 + 30_000)).toBe(false);
  });

  it('handles per-second and fractional limits', () => {
    const perSecond = new RateBucket(5, SECOND_MS, T0);
    perSecond.take(5, T0);
    expect(perSecond.waitMs(1, T0)).toBe(200);
    expect(perSecond.remaining(T0 + 200)).toBe(1);
    const fractional = new RateBucket(1.5, SECOND_MS, T0);
    fractional.take(1, T0);
    expect(fractional.remaining(T0)).toBe(0);
    expect(fractional.waitMs(1, T0)).toBe(1_000 / 3);
    expect(fractional.covers(1, T0 + 334)).toBe(true);
  });

  it('takes back unused units without going above the capacity', () => {
    const bucket = new RateBucket(100, MINUTE_MS, T0);
    bucket.take(80, T0);
    bucket.giveBack(30, T0);
    expect(bucket.remaining(T0)).toBe(50);
    bucket.giveBack(1_000, T0);
    expect(bucket.remaining(T0)).toBe(100);
    expect(bucket.fullAt(T0)).toBe(T0);
  });

  it('may go below empty when taken past what it holds, and refills from there', () => {
    const bucket = new RateBucket(10, SECOND_MS, T0);
    bucket.take(15, T0);
    expect(bucket.remaining(T0)).toBe(-5);
    expect(bucket.fullAt(T0)).toBe(T0 + 1_500);
  });

  it('refills nothing when the clock steps back, and continues from the latest time', () => {
    const bucket = new RateBucket(60, MINUTE_MS, T0);
    bucket.take(60, T0 + 10_000);
    expect(bucket.remaining(T0)).toBe(0);
    expect(bucket.remaining(T0 + 11_000)).toBe(1);
  });
});

describe('TargetRateLimits', () => {
  it('admits everything without a limit and reports no bucket', () => {
    const limits = new TargetRateLimits();
    limits.configure(undefined, T0);
    for (let i = 0; i < 1_000; i++) expect(limits.admit(cost({ inputTokens: 1e6, outputTokens: 1e6 }), T0)).toEqual({ ok: true });
    expect(limits.states(T0)).toEqual([]);
  });

  it('admits up to the request limit, refuses without drawing, and recovers at the exact rate', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 3 }, T0);
    for (let i = 0; i < 3; i++) expect(limits.admit(cost(), T0).ok).toBe(true);
    expect(limits.admit(cost(), T0)).toEqual({ ok: false, retryAfterSec: 20, short: 'requests', limit: 3, windowMs: MINUTE_MS, cost: 1 });
    // Refusals draw nothing, however many there are.
    for (let i = 0; i < 10; i++) limits.admit(cost(), T0 + 1);
    expect(refusal(limits.admit(cost(), T0 + 19_000)).retryAfterSec).toBe(1);
    expect(limits.admit(cost(), T0 + 20_000).ok).toBe(true);
    expect(limits.admit(cost(), T0 + 20_000).ok).toBe(false);
  });

  it('rounds retry-after up to whole seconds, at least 1', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerSecond: 10 }, T0);
    for (let i = 0; i < 10; i++) limits.admit(cost(), T0);
    expect(refusal(limits.admit(cost(), T0)).retryAfterSec).toBe(1);
    limits.configure({ inputTokensPerMinute: 1_000 }, T0);
    expect(limits.admit(cost({ inputTokens: 1_000 }), T0).ok).toBe(true);
    expect(refusal(limits.admit(cost({ inputTokens: 500 }), T0 + 10)).retryAfterSec).toBe(30);
    expect(refusal(limits.admit(cost({ inputTokens: 500 }), T0 + 1_000)).retryAfterSec).toBe(29);
    expect(refusal(limits.admit(cost({ inputTokens: 500 }), T0 + 1_001)).retryAfterSec).toBe(29);
  });

  it('takes from every bucket or from none, and waits for the slowest short bucket', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 2, inputTokensPerMinute: 600, outputTokensPerMinute: 3_000 }, T0);
    expect(limits.admit(cost({ inputTokens: 500, outputTokens: 1_000 }), T0).ok).toBe(true);
    // Short on input tokens only: nothing is drawn from the request and output buckets.
    expect(limits.admit(cost({ inputTokens: 200, outputTokens: 1_000 }), T0)).toEqual({
      ok: false,
      retryAfterSec: 10,
      short: 'input-tokens',
      limit: 600,
      windowMs: MINUTE_MS,
      cost: 200,
    });
    expect(limits.states(T0).map((state) => [state.name, state.remaining])).toEqual([
      ['requests', 1],
      ['input-tokens', 100],
      ['output-tokens', 2_000],
    ]);
    expect(limits.admit(cost({ inputTokens: 100, outputTokens: 1_000 }), T0).ok).toBe(true);
    // Short on requests (30 s) and output tokens (40 s): retry-after covers both; the first is named.
    expect(limits.admit(cost({ outputTokens: 3_000 }), T0)).toMatchObject({ ok: false, retryAfterSec: 40, short: 'requests' });
    expect(limits.admit(cost({ outputTokens: 1_500 }), T0)).toMatchObject({ ok: false, retryAfterSec: 30, short: 'requests' });
  });

  it('checks only the token limits that are set', () => {
    const inputOnly = new TargetRateLimits();
    inputOnly.configure({ inputTokensPerMinute: 100 }, T0);
    expect(inputOnly.admit(cost({ inputTokens: 100, outputTokens: 1e9 }), T0).ok).toBe(true);
    expect(inputOnly.admit(cost({ inputTokens: 1 }), T0).ok).toBe(false);
    const outputOnly = new TargetRateLimits();
    outputOnly.configure({ outputTokensPerMinute: 100 }, T0);
    expect(outputOnly.admit(cost({ inputTokens: 1e9, outputTokens: 100 }), T0).ok).toBe(true);
    expect(outputOnly.admit(cost({ outputTokens: 1 }), T0)).toMatchObject({ ok: false, short: 'output-tokens' });
    expect(outputOnly.states(T0).map((state) => state.name)).toEqual(['output-tokens']);
  });

  it('refuses a call larger than a limit every time, with retry-after until the bucket is full', () => {
    const limits = new TargetRateLimits();
    limits.configure({ outputTokensPerMinute: 1_000 }, T0);
    expect(limits.admit(cost({ outputTokens: 400 }), T0).ok).toBe(true);
    const tooLarge = refusal(limits.admit(cost({ outputTokens: 4_096 }), T0));
    expect(tooLarge).toMatchObject({ retryAfterSec: 24, short: 'output-tokens', cost: 4_096, limit: 1_000 });
    expect(refusal(limits.admit(cost({ outputTokens: 4_096 }), T0 + MINUTE_MS)).retryAfterSec).toBe(1);
  });

  it('gives back unused output tokens and nothing beyond what was drawn', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 10, outputTokensPerMinute: 1_000 }, T0);
    limits.admit(cost({ outputTokens: 600 }), T0);
    limits.refund(cost({ requests: 0, outputTokens: 600 - 25 }), T0);
    expect(limits.states(T0).map((state) => [state.name, state.remaining])).toEqual([
      ['requests', 9],
      ['output-tokens', 975],
    ]);
  });

  it('keeps the level of an unchanged bucket, refills a changed one and drops a cleared one', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 10, inputTokensPerMinute: 1_000 }, T0);
    limits.admit(cost({ inputTokens: 500 }), T0);
    limits.configure({ requestsPerMinute: 10, inputTokensPerMinute: 2_000, outputTokensPerMinute: 50 }, T0);
    expect(limits.states(T0).map((state) => [state.name, state.limit, state.remaining])).toEqual([
      ['requests', 10, 9],
      ['input-tokens', 2_000, 2_000],
      ['output-tokens', 50, 50],
    ]);
    limits.configure({ requestsPerMinute: 10 }, T0);
    expect(limits.states(T0).map((state) => state.name)).toEqual(['requests']);
    limits.configure({ requestsPerMinute: 10 }, T0, true);
    expect(limits.states(T0)[0]?.remaining).toBe(10);
    limits.configure(undefined, T0);
    expect(limits.states(T0)).toEqual([]);
    expect(limits.admit(cost({ inputTokens: 1e9 }), T0)).toEqual({ ok: true });
  });

  it('treats the same number per second and per minute as different limits', () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 5 }, T0);
    for (let i = 0; i < 5; i++) limits.admit(cost(), T0);
    limits.configure({ requestsPerSecond: 5 }, T0);
    expect(limits.states(T0)).toEqual([{ name: 'requests', limit: 5, windowMs: SECOND_MS, remaining: 5, fullAt: T0 }]);
  });
});

describe('describeRefusal', () => {
  it('names the limit, and says when the call alone is larger than it', () => {
    const base = { ok: false as const, retryAfterSec: 1, limit: 50, windowMs: MINUTE_MS };
    expect(describeRefusal({ ...base, short: 'requests', cost: 1 })).toBe('This request would exceed the rate limit of 50 requests per minute (provider-sim)');
    expect(describeRefusal({ ...base, short: 'requests', cost: 1, windowMs: SECOND_MS })).toBe(
      'This request would exceed the rate limit of 50 requests per second (provider-sim)',
    );
    expect(describeRefusal({ ...base, short: 'output-tokens', cost: 64 })).toBe(
      "This request's 64 output tokens exceed the rate limit of 50 output tokens per minute on their own (provider-sim)",
    );
  });
});

describe('rate-limit headers', () => {
  it('sends none without a limit', () => {
    expect(anthropicRateLimitHeaders([])).toEqual({});
    expect(toolRateLimitHeaders([], T0)).toEqual({});
  });

  it("reports each bucket in Anthropic's headers, with the token buckets together", () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000 }, T0);
    limits.admit(cost({ inputTokens: 1_000, outputTokens: 400 }), T0);
    expect(anthropicRateLimitHeaders(limits.states(T0 + 100))).toEqual({
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '49',
      // 1.2 s to refill one request, 100 ms of which have passed: full at T0 + 1.2 s, rounded up.
      'anthropic-ratelimit-requests-reset': '2026-12-01T00:00:02Z',
      'anthropic-ratelimit-input-tokens-limit': '40000',
      'anthropic-ratelimit-input-tokens-remaining': '39066',
      'anthropic-ratelimit-input-tokens-reset': '2026-12-01T00:00:02Z',
      'anthropic-ratelimit-output-tokens-limit': '8000',
      'anthropic-ratelimit-output-tokens-remaining': '7613',
      'anthropic-ratelimit-output-tokens-reset': '2026-12-01T00:00:03Z',
      'anthropic-ratelimit-tokens-limit': '48000',
      'anthropic-ratelimit-tokens-remaining': String(39_066 + 7_613),
      'anthropic-ratelimit-tokens-reset': '2026-12-01T00:00:03Z',
    });
  });

  it('reports the tokens group from the one token limit that is set', () => {
    const limits = new TargetRateLimits();
    limits.configure({ inputTokensPerMinute: 1_000 }, T0);
    expect(anthropicRateLimitHeaders(limits.states(T0))).toEqual({
      'anthropic-ratelimit-input-tokens-limit': '1000',
      'anthropic-ratelimit-input-tokens-remaining': '1000',
      'anthropic-ratelimit-input-tokens-reset': '2026-12-01T00:00:00Z',
      'anthropic-ratelimit-tokens-limit': '1000',
      'anthropic-ratelimit-tokens-remaining': '1000',
      'anthropic-ratelimit-tokens-reset': '2026-12-01T00:00:00Z',
    });
  });

  it("reports a tool's request bucket in the IETF draft's headers, reset in seconds", () => {
    const limits = new TargetRateLimits();
    limits.configure({ requestsPerSecond: 2 }, T0);
    limits.admit(cost(), T0);
    limits.admit(cost(), T0);
    expect(toolRateLimitHeaders(limits.states(T0 + 100), T0 + 100)).toEqual({ 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' });
    limits.configure({ requestsPerMinute: 6 }, T0);
    limits.admit(cost(), T0);
    expect(toolRateLimitHeaders(limits.states(T0), T0)).toEqual({ 'ratelimit-limit': '6', 'ratelimit-remaining': '5', 'ratelimit-reset': '10' });
  });
});
