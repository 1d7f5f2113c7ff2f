import type { RedisOutageConfig } from '../config/schema.js';
import { bucketRefusal, type AdmissionDecision } from './admission-policy.js';
import { takeFromBucket, type BucketState, type BucketTake } from './local-token-bucket.js';

/**
 * What a submission gets while Redis — the token buckets, the backlog and Idempotency-Keys — does
 * not answer. Fail closed (the default) refuses with 503 overloaded; fail open admits per a local
 * token bucket per tenant in this API instance, bounded per outage, and records nothing in Redis.
 */

export type RedisOutagePolicy = RedisOutageConfig['policy'];

/** How one submission was decided during an outage (the metric's `outcome` label). */
export type RedisOutageOutcome = 'refused' | 'idempotency_key_refused' | 'bound_reached' | 'rate_limited' | 'admitted';

export interface RedisOutageFacts {
  policy: RedisOutagePolicy;
  /** The request carries an Idempotency-Key: its contract lives in Redis and cannot be honoured now. */
  idempotencyKey: boolean;
  /** Runs this instance admitted through the fallback since the outage began. */
  admittedThisOutage: number;
  maxAdmittedPerOutage: number;
  /** What the tenant's local bucket would answer for one token now. */
  localBucket: Pick<BucketTake, 'allowed' | 'waitMs'>;
}

export interface RedisOutageDecision {
  outcome: RedisOutageOutcome;
  decision: AdmissionDecision;
}

/**
 * Retry hint while Redis is away: ioredis' reconnect backoff tops out at 2 s, so a retry after
 * that finds a reconnect attempt made (or the instance answering again) rather than the same wait.
 */
export const REDIS_OUTAGE_RETRY_AFTER_SEC = 2;

const overloaded: AdmissionDecision = { outcome: 'rejected', reason: 'overloaded', retryAfterSec: REDIS_OUTAGE_RETRY_AFTER_SEC, redisOutage: true };

export function redisOutageDecision(f: RedisOutageFacts): RedisOutageDecision {
  if (f.policy === 'fail-closed') return { outcome: 'refused', decision: overloaded };
  // Admitting without the key's record would run a retried request twice: the promise the key makes.
  if (f.idempotencyKey) return { outcome: 'idempotency_key_refused', decision: overloaded };
  if (f.admittedThisOutage >= f.maxAdmittedPerOutage) return { outcome: 'bound_reached', decision: overloaded };
  const refusal = bucketRefusal(f.localBucket);
  if (refusal) return { outcome: 'rate_limited', decision: { ...refusal, redisOutage: true } };
  return { outcome: 'admitted', decision: { outcome: 'admitted', reason: 'capacity_available', redisOutage: true } };
}

/** How an outage ended, for the log line that says so. */
export interface RedisOutageSummary {
  lastedMs: number;
  admitted: number;
}

/**
 * This API instance's view of a Redis outage: when it began, how many runs the fallback admitted
 * since, and a local bucket per tenant (tenants come from config, so the map is bounded). The
 * outage ends when a Redis call answers again.
 */
export class RedisOutageFallback {
  private readonly buckets = new Map<string, BucketState>();
  private since: number | undefined;
  private admitted = 0;

  constructor(private readonly config: RedisOutageConfig) {}

  get policy(): RedisOutagePolicy {
    return this.config.policy;
  }

  /** Decides one submission Redis could not decide; `began` is true for the outage's first one. */
  decide(tenantId: string, idempotencyKey: boolean, now: number): RedisOutageDecision & { began: boolean } {
    const began = this.since === undefined;
    this.since ??= now;
    // The token is taken only if the run is admitted: a refusal for another reason costs nothing.
    const { state, take } = takeFromBucket(this.buckets.get(tenantId), this.config.localBucket, now);
    const result = redisOutageDecision({
      policy: this.config.policy,
      idempotencyKey,
      admittedThisOutage: this.admitted,
      maxAdmittedPerOutage: this.config.maxAdmittedPerOutage,
      localBucket: take,
    });
    if (result.outcome === 'admitted') {
      this.buckets.set(tenantId, state);
      this.admitted += 1;
    }
    return { ...result, began };
  }

  /** Redis answered: ends the outage, if there was one, and says how it went. */
  redisAnswered(now: number): RedisOutageSummary | undefined {
    if (this.since === undefined) return undefined;
    const summary = { lastedMs: now - this.since, admitted: this.admitted };
    this.since = undefined;
    this.admitted = 0;
    return summary;
  }
}
