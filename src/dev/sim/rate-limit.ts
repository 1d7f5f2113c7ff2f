/**
 * Provider-style rate limits of the provider simulator: continuously refilled buckets shared by
 * every caller of a target, the admission of one call against them, and the answer headers that
 * report them. Pure: every method takes `now` (ms since the epoch).
 */
import type { RateLimit } from './fault-profile.js';

export const MINUTE_MS = 60_000;
export const SECOND_MS = 1_000;

/**
 * A bucket of `capacity` units that refills continuously at capacity per `windowMs` and starts
 * full. The shortfall from full is kept in unit·ms (a unit is worth windowMs of them, and refill
 * removes `capacity` of them per ms), so integral limits, costs and times stay exact integers.
 */
export class RateBucket {
  private shortfall = 0;
  private at: number;

  constructor(
    readonly capacity: number,
    readonly windowMs: number,
    now: number,
  ) {
    this.at = now;
  }

  /** Units that can be taken now. A clock that steps back refills nothing. */
  available(now: number): number {
    this.refill(now);
    return (this.capacity * this.windowMs - this.shortfall) / this.windowMs;
  }

  /** Whole units left, as the headers report them. */
  remaining(now: number): number {
    return Math.floor(this.available(now));
  }

  /** When the bucket will be full again if nothing more is taken. */
  fullAt(now: number): number {
    this.refill(now);
    return this.at + this.shortfall / this.capacity;
  }

  /**
   * Ms until `cost` units are available. A cost above the capacity can never be covered: it gets
   * the time until the bucket is full, so a caller waits at most one window before it is refused again.
   */
  waitMs(cost: number, now: number): number {
    this.refill(now);
    const needed = this.shortfall - (this.capacity - Math.min(cost, this.capacity)) * this.windowMs;
    return Math.max(0, needed / this.capacity);
  }

  covers(cost: number, now: number): boolean {
    return cost <= this.available(now);
  }

  take(cost: number, now: number): void {
    this.refill(now);
    this.shortfall += cost * this.windowMs;
  }

  /** Returns units taken but not used; the bucket never holds more than its capacity. */
  giveBack(amount: number, now: number): void {
    this.refill(now);
    this.shortfall = Math.max(0, this.shortfall - amount * this.windowMs);
  }

  private refill(now: number): void {
    if (now <= this.at) return;
    this.shortfall = Math.max(0, this.shortfall - (now - this.at) * this.capacity);
    this.at = now;
  }
}

export type BucketName = 'requests' | 'input-tokens' | 'output-tokens';

/** What one call draws: one request, and for a Messages call its input estimate and max_tokens. */
export interface CallCost {
  requests: number;
  inputTokens: number;
  outputTokens: number;
}

export interface BucketState {
  name: BucketName;
  limit: number;
  windowMs: number;
  remaining: number;
  fullAt: number;
}

export type Admission =
  | { ok: true }
  | {
      ok: false;
      /** Whole seconds, at least 1: until every bucket the call is short in can cover it. */
      retryAfterSec: number;
      /** The first bucket the call is short in, for the refusal's message. */
      short: BucketName;
      limit: number;
      windowMs: number;
      cost: number;
    };

const BUCKET_SPECS: readonly { name: BucketName; field: keyof RateLimit; windowMs: number; cost: keyof CallCost }[] = [
  { name: 'requests', field: 'requestsPerMinute', windowMs: MINUTE_MS, cost: 'requests' },
  { name: 'requests', field: 'requestsPerSecond', windowMs: SECOND_MS, cost: 'requests' },
  { name: 'input-tokens', field: 'inputTokensPerMinute', windowMs: MINUTE_MS, cost: 'inputTokens' },
  { name: 'output-tokens', field: 'outputTokensPerMinute', windowMs: MINUTE_MS, cost: 'outputTokens' },
];

/** The buckets of one target, built from its `rateLimit`; with no limit it admits everything. */
export class TargetRateLimits {
  private readonly buckets = new Map<BucketName, { bucket: RateBucket; cost: keyof CallCost }>();

  /**
   * Applies a target's (new) limits. A bucket whose limit is unchanged keeps its level unless
   * `refill`; a new or changed one starts full; one no longer limited goes.
   */
  configure(limit: RateLimit | undefined, now: number, refill = false): void {
    const wanted = new Set<BucketName>();
    for (const spec of BUCKET_SPECS) {
      const capacity = limit?.[spec.field];
      if (capacity === undefined) continue;
      wanted.add(spec.name);
      const current = this.buckets.get(spec.name)?.bucket;
      if (!refill && current?.capacity === capacity && current.windowMs === spec.windowMs) continue;
      this.buckets.set(spec.name, { bucket: new RateBucket(capacity, spec.windowMs, now), cost: spec.cost });
    }
    for (const name of this.buckets.keys()) if (!wanted.has(name)) this.buckets.delete(name);
  }

  /** Takes the cost from every bucket, or from none when any bucket cannot cover its share. */
  admit(cost: CallCost, now: number): Admission {
    let refusal: Extract<Admission, { ok: false }> | undefined;
    let waitMs = 0;
    for (const [name, { bucket, cost: field }] of this.buckets) {
      if (bucket.covers(cost[field], now)) continue;
      refusal ??= { ok: false, retryAfterSec: 0, short: name, limit: bucket.capacity, windowMs: bucket.windowMs, cost: cost[field] };
      waitMs = Math.max(waitMs, bucket.waitMs(cost[field], now));
    }
    if (refusal !== undefined) return { ...refusal, retryAfterSec: Math.max(1, Math.ceil(waitMs / SECOND_MS)) };
    for (const { bucket, cost: field } of this.buckets.values()) bucket.take(cost[field], now);
    return { ok: true };
  }

  /** Gives back what an admitted call drew but did not use (output tokens below max_tokens). */
  refund(unused: CallCost, now: number): void {
    for (const { bucket, cost: field } of this.buckets.values()) if (unused[field] > 0) bucket.giveBack(unused[field], now);
  }

  states(now: number): BucketState[] {
    return [...this.buckets].map(([name, { bucket }]) => ({
      name,
      limit: bucket.capacity,
      windowMs: bucket.windowMs,
      remaining: bucket.remaining(now),
      fullAt: bucket.fullAt(now),
    }));
  }
}

const BUCKET_UNITS: Record<BucketName, string> = { requests: 'requests', 'input-tokens': 'input tokens', 'output-tokens': 'output tokens' };

export function describeRefusal(refusal: Extract<Admission, { ok: false }>): string {
  const rate = `${refusal.limit} ${BUCKET_UNITS[refusal.short]} per ${refusal.windowMs === SECOND_MS ? 'second' : 'minute'}`;
  return refusal.cost > refusal.limit
    ? `This request's ${refusal.cost} ${BUCKET_UNITS[refusal.short]} exceed the rate limit of ${rate} on their own (provider-sim)`
    : `This request would exceed the rate limit of ${rate} (provider-sim)`;
}

/** RFC 3339 at whole seconds, rounded up so the bucket is full by then. */
function rfc3339(ms: number): string {
  return new Date(Math.ceil(ms / SECOND_MS) * SECOND_MS).toISOString().replace('.000Z', 'Z');
}

function anthropicHeaders(prefix: string, limit: number, remaining: number, fullAt: number): Record<string, string> {
  return {
    [`anthropic-ratelimit-${prefix}-limit`]: String(limit),
    [`anthropic-ratelimit-${prefix}-remaining`]: String(remaining),
    [`anthropic-ratelimit-${prefix}-reset`]: rfc3339(fullAt),
  };
}

/**
 * Anthropic's headers, one group per configured bucket, plus `tokens`: the input and output
 * buckets together (limits and remainders summed, reset when both are full), sent whenever
 * either token limit is set.
 */
export function anthropicRateLimitHeaders(states: readonly BucketState[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const state of states) Object.assign(headers, anthropicHeaders(state.name, state.limit, state.remaining, state.fullAt));
  const tokens = states.filter((state) => state.name !== 'requests');
  if (tokens.length > 0) {
    const sum = (pick: (state: BucketState) => number) => tokens.reduce((total, state) => total + pick(state), 0);
    Object.assign(headers, anthropicHeaders('tokens', sum((s) => s.limit), sum((s) => s.remaining), Math.max(...tokens.map((s) => s.fullAt))));
  }
  return headers;
}

/** The IETF draft's `RateLimit-*` trio for a tool's one request bucket; reset is whole seconds until full. */
export function toolRateLimitHeaders(states: readonly BucketState[], now: number): Record<string, string> {
  const requests = states.find((state) => state.name === 'requests');
  if (requests === undefined) return {};
  return {
    'ratelimit-limit': String(requests.limit),
    'ratelimit-remaining': String(requests.remaining),
    'ratelimit-reset': String(Math.max(0, Math.ceil((requests.fullAt - now) / SECOND_MS))),
  };
}
