import { describe, expect, it } from 'vitest';
import { BucketRefusalMemo, MEMO_MAX_MS } from '../../../src/admission/bucket-refusal-memo.js';
import { takeFromBucket, type BucketRate, type BucketState } from '../../../src/admission/local-token-bucket.js';

const T0 = 1_767_225_600_000;
const rate = (capacity: number, refillPerSec: number): BucketRate => ({ capacity, refillPerSec });
const refused = (waitMs: number, tokensLeft = 0) => ({ allowed: false, tokensLeft, waitMs });

describe('BucketRefusalMemo', () => {
  it('answers a remembered refusal until the tokens can exist, with the wait left', () => {
    const memo = new BucketRefusalMemo();
    memo.learn('b', rate(5, 10), 1, refused(100, 0), T0);
    expect(memo.refusal('b', rate(5, 10), 1, T0)).toEqual({ allowed: false, tokensLeft: 0, waitMs: 100 });
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 40)).toEqual({ allowed: false, tokensLeft: 0.4, waitMs: 60 });
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 99)?.waitMs).toBe(1);
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 100)).toBeUndefined();
    // Forgotten once past: the next answer must come from Redis again.
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 50)).toBeUndefined();
  });

  it('remembers no longer than MEMO_MAX_MS, however long the wait, and answers the real wait meanwhile', () => {
    const memo = new BucketRefusalMemo();
    memo.learn('b', rate(5, 0.01), 1, refused(100_000), T0);
    expect(memo.refusal('b', rate(5, 0.01), 1, T0 + MEMO_MAX_MS - 1)?.waitMs).toBe(100_000 - MEMO_MAX_MS + 1);
    expect(memo.refusal('b', rate(5, 0.01), 1, T0 + MEMO_MAX_MS)).toBeUndefined();
  });

  it('asks Redis again when the rate changed, for a smaller cost, or when the clock stepped back', () => {
    const memo = new BucketRefusalMemo();
    const learn = () => memo.learn('b', rate(5, 10), 2, refused(200), T0);
    learn();
    expect(memo.refusal('b', rate(5, 20), 2, T0 + 1)).toBeUndefined();
    learn();
    expect(memo.refusal('b', rate(6, 10), 2, T0 + 1)).toBeUndefined();
    learn();
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 1)).toBeUndefined();
    learn();
    expect(memo.refusal('b', rate(5, 10), 3, T0 + 1)?.waitMs).toBe(199);
    expect(memo.refusal('b', rate(5, 10), 2, T0 - 1)).toBeUndefined();
  });

  it('forgets a bucket when Redis allows', () => {
    const memo = new BucketRefusalMemo();
    memo.learn('b', rate(5, 10), 1, refused(100), T0);
    memo.learn('b', rate(5, 10), 1, { allowed: true, tokensLeft: 0, waitMs: 0 }, T0 + 1);
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 2)).toBeUndefined();
  });

  it('remembers a bucket that never refills (wait -1) for MEMO_MAX_MS, answering -1', () => {
    const memo = new BucketRefusalMemo();
    memo.learn('never', rate(1, 0), 1, refused(-1), T0);
    expect(memo.refusal('never', rate(1, 0), 1, T0 + MEMO_MAX_MS - 1)).toEqual({ allowed: false, tokensLeft: 0, waitMs: -1 });
    expect(memo.refusal('never', rate(1, 0), 1, T0 + MEMO_MAX_MS)).toBeUndefined();
  });

  it('keeps buckets apart and holds at most maxEntries, dropping the oldest', () => {
    const memo = new BucketRefusalMemo(2);
    for (const key of ['a', 'b', 'c']) memo.learn(key, rate(5, 10), 1, refused(100), T0);
    expect(memo.refusal('a', rate(5, 10), 1, T0 + 1)).toBeUndefined();
    expect(memo.refusal('b', rate(5, 10), 1, T0 + 1)).toBeDefined();
    expect(memo.refusal('c', rate(5, 10), 1, T0 + 1)).toBeDefined();
  });

  it('never refuses what the bucket would allow: 20,000 random requests against the bucket itself', () => {
    // The bucket (token-bucket-take.lua as a pure function) stands in for Redis; requests come at
    // random times with random rates (a breaker changing the effective refill) and costs. Whenever
    // the memo answers, the bucket asked at that moment must refuse too.
    let seed = 42;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    const memo = new BucketRefusalMemo();
    const rates = [rate(5, 10), rate(5, 2.5), rate(3, 0.7)];
    let state: BucketState | undefined;
    let now = T0;
    let answered = 0;
    let r = rates[0]!;
    let cost = 1;
    for (let i = 0; i < 20_000; i++) {
      now += Math.floor(random() * 60);
      if (random() < 0.01) r = rates[Math.floor(random() * rates.length)]!;
      if (random() < 0.01) cost = 1 + Math.floor(random() * 2);
      const remembered = memo.refusal('b', r, cost, now);
      const asked = takeFromBucket(state, r, now, cost);
      if (remembered) {
        answered++;
        expect(asked.take.allowed, `request ${i}`).toBe(false);
        // Both round the wait up to the ms, from levels counted at different moments.
        expect(remembered.waitMs).toBeLessThanOrEqual(asked.take.waitMs + 1);
        continue;
      }
      state = asked.state;
      memo.learn('b', r, cost, asked.take, now);
    }
    // The memo did answer a good share, or the check above proved nothing.
    expect(answered).toBeGreaterThan(10_000);
  });
});
