import { describe, expect, it } from 'vitest';
import { LocalTokenBuckets, takeFromBucket, type BucketRate, type BucketState } from '../../../src/admission/local-token-bucket.js';

const T0 = 1_767_225_600_000;
const rate = (capacity: number, refillPerSec: number): BucketRate => ({ capacity, refillPerSec });

/** Takes `n` times at `now`, threading the state; answers every take and the final state. */
function takeMany(state: BucketState | undefined, r: BucketRate, now: number, n: number) {
  const takes = [];
  for (let i = 0; i < n; i++) {
    const res = takeFromBucket(state, r, now);
    state = res.state;
    takes.push(res.take);
  }
  return { takes, state: state! };
}

describe('takeFromBucket (token-bucket-take.lua in process)', () => {
  it('starts full: a new bucket allows exactly `capacity` takes at one instant, then refuses', () => {
    const { takes, state } = takeMany(undefined, rate(5, 1), T0, 6);
    expect(takes.map((t) => t.allowed)).toEqual([true, true, true, true, true, false]);
    expect(takes.slice(0, 5).map((t) => t.tokensLeft)).toEqual([4, 3, 2, 1, 0]);
    expect(takes.slice(0, 5).every((t) => t.waitMs === 0)).toBe(true);
    expect(state).toEqual({ tokens: 0, ts: T0 });
  });

  it('answers the real wait until the next token: (cost − tokens) / rate, rounded up to the ms', () => {
    const empty = { tokens: 0, ts: T0 };
    expect(takeFromBucket(empty, rate(5, 10), T0).take).toEqual({ allowed: false, tokensLeft: 0, waitMs: 100 });
    expect(takeFromBucket(empty, rate(5, 3), T0).take.waitMs).toBe(334);
    expect(takeFromBucket({ tokens: 0.75, ts: T0 }, rate(5, 1), T0).take.waitMs).toBe(250);
    expect(takeFromBucket(empty, rate(5, 0.5), T0).take.waitMs).toBe(2_000);
  });

  it('refills for the time elapsed, fractionally, and never above capacity', () => {
    const empty = { tokens: 0, ts: T0 };
    expect(takeFromBucket(empty, rate(5, 10), T0 + 50).take).toMatchObject({ allowed: false, tokensLeft: 0.5 });
    expect(takeFromBucket(empty, rate(5, 10), T0 + 100).take).toEqual({ allowed: true, tokensLeft: 0, waitMs: 0 });
    expect(takeFromBucket(empty, rate(5, 10), T0 + 60_000).take).toEqual({ allowed: true, tokensLeft: 4, waitMs: 0 });
    expect(takeFromBucket({ tokens: 9, ts: T0 }, rate(5, 10), T0).take.tokensLeft).toBe(4);
  });

  it('takes `cost` tokens at once, and waits for all of them when short', () => {
    expect(takeFromBucket(undefined, rate(5, 1), T0, 3).take).toEqual({ allowed: true, tokensLeft: 2, waitMs: 0 });
    expect(takeFromBucket({ tokens: 2, ts: T0 }, rate(5, 1), T0, 3).take).toEqual({ allowed: false, tokensLeft: 2, waitMs: 1_000 });
  });

  it('answers waitMs −1 (never) for a bucket that does not refill', () => {
    const { takes } = takeMany(undefined, rate(2, 0), T0, 3);
    expect(takes[2]).toEqual({ allowed: false, tokensLeft: 0, waitMs: -1 });
    expect(takeFromBucket({ tokens: 0, ts: T0 }, rate(2, 0), T0 + 86_400_000).take.waitMs).toBe(-1);
  });

  it('mints nothing when the clock steps back, keeps the later ts, and counts the gap in the wait', () => {
    const ahead = { tokens: 0, ts: T0 + 60_000 };
    const { state, take } = takeFromBucket(ahead, rate(5, 1_000), T0);
    expect(take.allowed).toBe(false);
    expect(take.tokensLeft).toBe(0);
    expect(state.ts).toBe(T0 + 60_000);
    expect(take.waitMs).toBe(60_001);
  });

  it('keeps the state unchanged by a refusal apart from the refill', () => {
    const { state } = takeFromBucket({ tokens: 0.5, ts: T0 }, rate(5, 1), T0 + 100);
    expect(state.tokens).toBeCloseTo(0.6, 10);
    expect(state.ts).toBe(T0 + 100);
  });
});

describe('LocalTokenBuckets', () => {
  it('keeps one bucket per key', () => {
    const buckets = new LocalTokenBuckets();
    expect(buckets.take('tenant-a', rate(1, 1), T0).allowed).toBe(true);
    expect(buckets.take('tenant-a', rate(1, 1), T0).allowed).toBe(false);
    expect(buckets.take('tenant-b', rate(1, 1), T0).allowed).toBe(true);
    expect(buckets.take('tenant-a', rate(1, 1), T0 + 1_000).allowed).toBe(true);
  });
});
