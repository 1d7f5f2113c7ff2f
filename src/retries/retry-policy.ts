import type { StepError } from '../steps/step-error.js';

/** How one dependency's calls are retried, in the one layer that retries (the processor). */
export interface RetryPolicy {
  /** Attempts in all, the first included: 1 means never retry. */
  maxAttempts: number;
  baseMs: number;
  capMs: number;
}

/** AWS full jitter: a random wait in [0, min(cap, base · 2^retry)), so retries spread instead of synchronizing. */
export function fullJitterMs(retry: number, policy: RetryPolicy, random: () => number): number {
  const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** Math.max(0, retry));
  return Math.floor(random() * ceiling);
}

/**
 * The wait before the next attempt of a failed call, or undefined when it must not be retried:
 * the error is not retryable (4xx, a spend-limit 429), the attempts are used up, or the wait plus
 * a minimal useful call would end after the run's deadline ("no credit for late assignments").
 * A `retry-after` from the dependency is a floor under the jittered wait.
 */
export function nextRetryDelay(opts: { error: StepError; attempt: number; policy: RetryPolicy; now: number; deadline: number; minCallMs: number; random: () => number }): number | undefined {
  const { error, attempt, policy } = opts;
  if (!error.retryable || attempt >= policy.maxAttempts) return undefined;
  const jittered = fullJitterMs(attempt - 1, policy, opts.random);
  const delay = Math.max(jittered, (error.retryAfterSec ?? 0) * 1000);
  if (opts.now + delay + opts.minCallMs > opts.deadline) return undefined;
  return delay;
}
