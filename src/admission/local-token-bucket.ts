/** A token bucket's answer to a take, from Redis (token-bucket-take.lua) or from this process. */
export interface BucketTake {
  allowed: boolean;
  tokensLeft: number;
  /** ms until `cost` tokens exist; -1: never (a bucket that does not refill). */
  waitMs: number;
}

export interface BucketRate {
  capacity: number;
  /** Tokens per second; 0 never refills. */
  refillPerSec: number;
}

export interface BucketState {
  tokens: number;
  /** When `tokens` was counted (ms). */
  ts: number;
}

/**
 * token-bucket-take.lua as a pure function, for a bucket kept in this process: refill for the time
 * elapsed, then take `cost`. The same rules and the same answer: a new bucket starts full, a clock
 * that steps back mints nothing, and `waitMs` is the real time until `cost` tokens exist (-1: never).
 */
export function takeFromBucket(state: BucketState | undefined, rate: BucketRate, now: number, cost = 1): { state: BucketState; take: BucketTake } {
  let tokens = state?.tokens ?? rate.capacity;
  let ts = state?.ts ?? now;
  if (now > ts) {
    tokens = Math.min(rate.capacity, tokens + ((now - ts) * rate.refillPerSec) / 1000);
    ts = now;
  }
  tokens = Math.min(tokens, rate.capacity);
  if (tokens >= cost) return { state: { tokens: tokens - cost, ts }, take: { allowed: true, tokensLeft: tokens - cost, waitMs: 0 } };
  const waitMs = rate.refillPerSec > 0 ? Math.ceil(((cost - tokens) * 1000) / rate.refillPerSec) + Math.max(0, ts - now) : -1;
  return { state: { tokens, ts }, take: { allowed: false, tokensLeft: tokens, waitMs } };
}

/**
 * Token buckets held in this process, one per key: the fallback when the shared buckets in Redis
 * cannot be reached. Keys are config names (tenants), so the map is bounded by the config.
 */
export class LocalTokenBuckets {
  private readonly buckets = new Map<string, BucketState>();

  take(key: string, rate: BucketRate, now: number, cost = 1): BucketTake {
    const { state, take } = takeFromBucket(this.buckets.get(key), rate, now, cost);
    this.buckets.set(key, state);
    return take;
  }
}
