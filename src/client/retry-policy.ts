/**
 * When the client tries again, as plain functions. Retries are opt-in and bounded: a submission is
 * retried only when Sluice said when (Retry-After), never sooner than that, and never past the
 * caller's bounds; an event stream reconnects a bounded number of times in a row. Every wait is
 * spread at random (`random`, in [0, 1)), so clients refused or cut off together do not all come
 * back in the same instant: a synchronised wave of retries is what turns a refusal into a storm.
 */

/** A wait of `floorMs` may grow by up to this share of itself, never shrink. */
export const RETRY_SPREAD = 0.5;

/** `floorMs` stretched by a random part of `RETRY_SPREAD`, capped at `capMs` but never below the floor. */
function spread(floorMs: number, capMs: number, random: () => number): number {
  return Math.max(floorMs, Math.min(capMs, floorMs * (1 + RETRY_SPREAD * random())));
}

export interface SubmitRetry {
  /** Attempts in all, the first included: 1 means no retry. */
  maxAttempts: number;
  /** The most time all the waits between attempts may take together. */
  maxWaitMs: number;
}

export const NO_RETRY: SubmitRetry = { maxAttempts: 1, maxWaitMs: 0 };

export interface RefusedAttempt {
  /** The attempt just refused, from 1. */
  attempt: number;
  retryable: boolean;
  retryAfterSec: number | undefined;
  /** Time spent waiting before this attempt, all waits together. */
  waitedMs: number;
  /** Time since the first attempt started. */
  elapsedMs: number;
}

/**
 * How long to wait before trying a refused submission again, or undefined to give up: at least the
 * server's Retry-After, spread by up to half as long again, and it must fit the attempts, the wait
 * budget and, when the caller gave the run a deadline, that deadline counted from the first attempt
 * (a run admitted after it is of no use). The spread shrinks to fit those bounds; the floor does not.
 */
export function submitRetryWaitMs(refused: RefusedAttempt, retry: SubmitRetry, deadlineMs: number | undefined, random: () => number): number | undefined {
  if (refused.attempt >= retry.maxAttempts || !refused.retryable || refused.retryAfterSec === undefined) return undefined;
  const floorMs = refused.retryAfterSec * 1000;
  if (refused.waitedMs + floorMs > retry.maxWaitMs) return undefined;
  if (deadlineMs !== undefined && refused.elapsedMs + floorMs >= deadlineMs) return undefined;
  // Just inside the deadline, as the floor is: a wait ending at it would be refused there.
  const capMs = Math.min(retry.maxWaitMs - refused.waitedMs, deadlineMs === undefined ? Number.POSITIVE_INFINITY : deadlineMs - refused.elapsedMs - 1);
  return spread(floorMs, capMs, random);
}

export function checkSubmitRetry(retry: SubmitRetry): SubmitRetry {
  if (!Number.isSafeInteger(retry.maxAttempts) || retry.maxAttempts < 1) throw new RangeError(`retry.maxAttempts must be a whole number from 1, not ${retry.maxAttempts}`);
  if (!Number.isFinite(retry.maxWaitMs) || retry.maxWaitMs < 0) throw new RangeError(`retry.maxWaitMs must be a non-negative number, not ${retry.maxWaitMs}`);
  return retry;
}

export interface Reconnect {
  /** Reconnects in a row without receiving an event, before the stream gives up. */
  maxReconnects: number;
  /** The first reconnect's wait; it doubles with each further one in a row. */
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RECONNECT: Reconnect = { maxReconnects: 5, baseDelayMs: 250, maxDelayMs: 10_000 };

/**
 * The wait before reconnect number `failures` in a row (from 1), or undefined past the bound. The
 * server's `retry:` field replaces the base; its Retry-After, when it refused, is a floor. The
 * backoff is spread over its upper half ("equal jitter"), the Retry-After as a submission's is.
 */
export function reconnectWaitMs(failures: number, policy: Reconnect, serverRetryMs: number | undefined, retryAfterSec: number | undefined, random: () => number): number | undefined {
  if (failures > policy.maxReconnects) return undefined;
  const backoff = Math.min(policy.maxDelayMs, (serverRetryMs ?? policy.baseDelayMs) * 2 ** (failures - 1));
  const floorMs = (retryAfterSec ?? 0) * 1000;
  return Math.max(backoff * (0.5 + 0.5 * random()), spread(floorMs, Number.POSITIVE_INFINITY, random));
}
