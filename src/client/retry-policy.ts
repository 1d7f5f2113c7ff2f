/**
 * When the client tries again, as plain functions. Retries are opt-in and bounded: a submission is
 * retried only when Sluice said when (Retry-After), never sooner than that, and never past the
 * caller's bounds; an event stream reconnects a bounded number of times in a row.
 */

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
 * How long to wait before trying a refused submission again, or undefined to give up: the wait is
 * the server's, and it must fit the attempts, the wait budget and, when the caller gave the run a
 * deadline, that deadline counted from the first attempt (a run admitted after it is of no use).
 */
export function submitRetryWaitMs(refused: RefusedAttempt, retry: SubmitRetry, deadlineMs: number | undefined): number | undefined {
  if (refused.attempt >= retry.maxAttempts || !refused.retryable || refused.retryAfterSec === undefined) return undefined;
  const waitMs = refused.retryAfterSec * 1000;
  if (refused.waitedMs + waitMs > retry.maxWaitMs) return undefined;
  if (deadlineMs !== undefined && refused.elapsedMs + waitMs >= deadlineMs) return undefined;
  return waitMs;
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
 * server's `retry:` field replaces the base; its Retry-After, when it refused, is a floor.
 */
export function reconnectWaitMs(failures: number, policy: Reconnect, serverRetryMs: number | undefined, retryAfterSec: number | undefined): number | undefined {
  if (failures > policy.maxReconnects) return undefined;
  const backoff = Math.min(policy.maxDelayMs, (serverRetryMs ?? policy.baseDelayMs) * 2 ** (failures - 1));
  return Math.max(backoff, (retryAfterSec ?? 0) * 1000);
}
