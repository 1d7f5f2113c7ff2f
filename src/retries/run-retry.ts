import { fullJitterMs, type RetryPolicy } from './retry-policy.js';

/**
 * What a trip through the retry topic may add to a retry's due time before the run runs again:
 * the outcome and status produces, the forwarder's resume and forward, the work topic's fetch and
 * dispatch. Measured at up to 1.3 s on a loaded 2-core machine (two processors, a 429 storm).
 */
export const RETRY_TOPIC_MARGIN_MS = 2_000;

/** Whether a run due back at `dueAt` from the retry topic still has time for a useful call. */
function backInTime(dueAt: number, deadline: number, minCallMs: number): boolean {
  return dueAt + RETRY_TOPIC_MARGIN_MS + minCallMs < deadline;
}

/**
 * When a run's next attempt may start after this one failed transiently: full jitter on the run's
 * failures so far, this one included. Undefined when the run's attempts are used up, or when the
 * trip through the retry topic could leave no time for a useful call: the run's fallback then
 * answers now, rather than its expiry later.
 */
export function transientRetryAt(opts: { priorFailures: number; policy: RetryPolicy; now: number; deadline: number; minCallMs: number; random: () => number }): number | undefined {
  const failures = opts.priorFailures + 1;
  if (failures >= opts.policy.maxAttempts) return undefined;
  const dueAt = opts.now + Math.max(1, fullJitterMs(failures, opts.policy, opts.random));
  return backInTime(dueAt, opts.deadline, opts.minCallMs) ? dueAt : undefined;
}

/**
 * When a step retry too long to wait for in the processor comes back through the retry topic: at
 * the step's own due time, counted as a failed attempt so `runRetry.maxAttempts` bounds how often
 * a run leaves and returns. Undefined as for `transientRetryAt`.
 */
export function deferredStepRetryAt(opts: { priorFailures: number; policy: RetryPolicy; dueAt: number; deadline: number; minCallMs: number }): number | undefined {
  if (opts.priorFailures + 1 >= opts.policy.maxAttempts) return undefined;
  return backInTime(opts.dueAt, opts.deadline, opts.minCallMs) ? opts.dueAt : undefined;
}

/** The most a waiter's return is spread after a breaker's next probe. */
const MAX_SPREAD_MS = 2_000;

/**
 * When a run waiting out an open breaker tries again: after the breaker's next probe, spread over
 * part of its open time so its waiters do not return as one wave, and never after the deadline.
 * A dependency no longer configured (`openMs` undefined) has no spread.
 */
export function breakerRetryAt(opts: { until: number; openMs: number | undefined; deadline: number; random: () => number }): number {
  const spread = opts.openMs === undefined ? 0 : Math.floor(opts.random() * Math.min(opts.openMs, MAX_SPREAD_MS));
  return Math.min(opts.until + spread, opts.deadline);
}
