import type { BucketRate, BucketTake } from './local-token-bucket.js';

/**
 * The longest a refusal is answered from memory. A shared bucket only gains tokens by refilling
 * (every instance only takes), so until its `waitMs` has passed Redis can only refuse again; the
 * bound is for what the memo cannot see: an operator deleting the bucket's key to let a tenant in.
 */
export const MEMO_MAX_MS = 1_000;

interface RememberedRefusal {
  rate: BucketRate;
  cost: number;
  tokensLeft: number;
  at: number;
  /** When the tokens can exist, as Redis answered; undefined: never (a bucket that does not refill). */
  readyAt: number | undefined;
  /** When the memory lapses: `readyAt`, or sooner (MEMO_MAX_MS). */
  until: number;
}

/**
 * Refusals of shared token buckets, remembered until the bucket can next have the tokens, so a
 * tenant far over its rate is refused without a Redis round trip per request: at 500 requests a
 * second over a quota of 10, the socket write of each EVALSHA was a fifth of the API's CPU. Pure
 * (the caller passes the time); keyed by bucket key, bounded by `maxEntries` (oldest dropped).
 */
export class BucketRefusalMemo {
  private readonly refusals = new Map<string, RememberedRefusal>();

  constructor(private readonly maxEntries = 10_000) {}

  /**
   * The answer Redis would give now, if a refusal of this bucket at this rate is remembered and
   * the tokens cannot have refilled yet, with the real wait left (which may outlast the memory);
   * otherwise undefined and Redis must be asked.
   */
  refusal(key: string, rate: BucketRate, cost: number, now: number): BucketTake | undefined {
    const r = this.refusals.get(key);
    if (!r) return undefined;
    // A different rate (a dependency's breaker changed the effective refill) or a smaller cost may
    // be let in sooner than remembered; a clock that stepped back says nothing about elapsed time.
    if (now >= r.until || now < r.at || cost < r.cost || r.rate.capacity !== rate.capacity || r.rate.refillPerSec !== rate.refillPerSec) {
      this.refusals.delete(key);
      return undefined;
    }
    const tokensLeft = Math.min(rate.capacity, r.tokensLeft + ((now - r.at) * rate.refillPerSec) / 1000);
    return { allowed: false, tokensLeft, waitMs: r.readyAt === undefined ? -1 : r.readyAt - now };
  }

  /** Learns from Redis's answer: a refusal is remembered (a wait of -1 means never), an admission forgets the bucket. */
  learn(key: string, rate: BucketRate, cost: number, take: BucketTake, now: number): void {
    this.refusals.delete(key);
    if (take.allowed || take.waitMs === 0) return;
    if (this.refusals.size >= this.maxEntries) this.refusals.delete(this.refusals.keys().next().value!);
    const never = take.waitMs < 0;
    this.refusals.set(key, { rate, cost, tokensLeft: take.tokensLeft, at: now, readyAt: never ? undefined : now + take.waitMs, until: now + (never ? MEMO_MAX_MS : Math.min(take.waitMs, MEMO_MAX_MS)) });
  }
}
