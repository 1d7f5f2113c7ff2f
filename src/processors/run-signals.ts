import type { RunRequested } from '../events/schemas.js';

/**
 * What the processor measures of a run against its admission, and which attempts measure it. The
 * times are read off two clocks: `admittedAt` is the API instance's, `at` the processor's.
 */

/** Seconds from a run's admission to `at`; a processor clock behind the API's reads as 0, not as a negative wait. */
export function secondsSinceAdmission(admittedAt: number, at: number): number {
  return Math.max(0, at - admittedAt) / 1000;
}

/**
 * Whether an attempt's start measures the wait since admission. Only an attempt that starts from
 * an admission does: the first, and a DLQ replay (which re-admits the run: a fresh `admittedAt`),
 * both without a due time. A run-level retry has a due time; since its admission it has run
 * earlier attempts and waited out a backoff, which is no queue's wait (the retry topic's depth
 * and its consumer group's lag show those). A start repeated by this processor after an
 * infrastructure failure was measured at the first start.
 */
export function measuresAdmissionWait(run: Pick<RunRequested, 'dueAt'>, infraFailures: number): boolean {
  return run.dueAt === null && infraFailures === 0;
}
