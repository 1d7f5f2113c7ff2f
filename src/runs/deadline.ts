import type { RunClass } from '../events/schemas.js';

export interface DeadlinePolicy {
  defaultInteractive: number;
  defaultBatch: number;
  min: number;
  max: number;
}

export type DeadlineResolution = { ok: true; deadline: number; budgetMs: number } | { ok: false; message: string };

/**
 * A run's deadline starts at admission (docs/contract.md) and is absolute from then on: every stage
 * compares against the same instant instead of restarting a relative timer.
 */
export function resolveDeadline(requestedMs: number | undefined, runClass: RunClass, policy: DeadlinePolicy, admittedAt: number): DeadlineResolution {
  const budgetMs = requestedMs ?? (runClass === 'batch' ? policy.defaultBatch : policy.defaultInteractive);
  if (!Number.isInteger(budgetMs)) return { ok: false, message: 'must be a whole number of milliseconds' };
  if (budgetMs < policy.min) return { ok: false, message: `must be at least ${policy.min} ms` };
  if (budgetMs > policy.max) return { ok: false, message: `must be at most ${policy.max} ms` };
  return { ok: true, deadline: admittedAt + budgetMs, budgetMs };
}

export function remainingMs(deadline: number, now: number): number {
  return Math.max(0, deadline - now);
}

export function isExpired(deadline: number, now: number): boolean {
  return now >= deadline;
}

/** A call may use its own timeout, but never more than the run has left. */
export function clampTimeout(callTimeoutMs: number, deadline: number, now: number): number {
  return Math.min(callTimeoutMs, remainingMs(deadline, now));
}

/** A call (or a retry, or a wait for one) is not started unless at least this much of the deadline would be left for it. */
export const MIN_USEFUL_CALL_MS = 100;

/**
 * The least a run needs left of its deadline to finish from a step on: a useful call's minimum for
 * that step and each after it. A run-level retry that would leave less is not made: the run ends
 * now (its fallback, or failed) instead of coming back only to expire.
 */
export function minTimeToFinishMs(stepsLeft: number): number {
  return MIN_USEFUL_CALL_MS * Math.max(1, stepsLeft);
}

/**
 * The deadline a run-level retry is held to, with `toFinishMs` still to be left after it: the
 * run's own, and for an interactive run no later than `interactiveWaitShare` of its time from
 * admission (plus what it needs to finish), so its wait for a retry is bounded as its wait at the
 * door is.
 */
export function retryDeadline(run: { class: 'interactive' | 'batch'; admittedAt: number; deadline: number }, interactiveWaitShare: number, toFinishMs: number): number {
  if (run.class !== 'interactive') return run.deadline;
  return Math.min(run.deadline, run.admittedAt + interactiveWaitShare * (run.deadline - run.admittedAt) + toFinishMs);
}
