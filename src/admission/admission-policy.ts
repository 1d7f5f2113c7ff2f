import type { PrepaidTurns, RunClass } from '../events/schemas.js';
import type { BreakerView } from '../breakers/breaker-gate.js';

/**
 * The overload contract at the door, as plain functions of their inputs: every
 * request is admitted, queued, deferred (429) or rejected (503) — decided early and honestly, with
 * a retry hint that is the real time until the answer could change.
 */

export type AdmissionOutcome = 'admitted' | 'queued' | 'deferred' | 'rejected';
export type AdmissionReason =
  | 'capacity_available'
  | 'waiting_for_capacity'
  | 'rate_limited'
  | 'token_budget_exhausted'
  | 'tenant_backlog_full'
  | 'overloaded'
  | 'deadline_unreachable'
  | 'dependency_unavailable';

export interface AdmissionDecision {
  outcome: AdmissionOutcome;
  reason: AdmissionReason;
  /** Whole seconds until retrying could succeed (deferred and rejected only). */
  retryAfterSec?: number;
  /** 1-based place in the line for this class (queued only). */
  queuePosition?: number;
  /**
   * Decided by the Redis outage policy, not in Redis: no backlog entry was recorded for it (one that
   * a timed-out script may still have written is left to its lease).
   */
  redisOutage?: true;
  /** Tokens taken from the tenant's token budget for this run, to be settled against its actual use. */
  tokenReservation?: number;
  /** Provider turns reserved for the run's calls, used by its first attempt and the rest given back. */
  prepaidTurns?: PrepaidTurns[];
}


/** The API reads breakers as processors do. */
export type DependencyState = BreakerView;

/** What the periodic refresh measured: runs finished per second and their moving execution time. */
export interface ServiceEstimate {
  ratePerSec: number | undefined;
  serviceTimeMs: number | undefined;
}

const MIN_RETRY_AFTER_SEC = 1;

/** Seconds as the contract's `retryAfterSec`: whole, at least one, never negative or NaN. */
export function retryAfterSeconds(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0) return MIN_RETRY_AFTER_SEC;
  return Math.max(MIN_RETRY_AFTER_SEC, Math.ceil(ms / 1000));
}

/** Open (or probing) dependencies among those a workflow needs. */
export function unavailable(needed: readonly string[], states: ReadonlyMap<string, DependencyState>): DependencyState[] {
  return needed.map((n) => states.get(n)).filter((s): s is DependencyState => s !== undefined && s.state !== 'closed');
}

/** The emergency throttle: while a needed dependency is open, entry refills slower. */
export function effectiveRefill(refillPerSec: number, anyOpen: boolean, emergencyFactor: number): number {
  return anyOpen ? refillPerSec * emergencyFactor : refillPerSec;
}

/**
 * An interactive run that needs an open dependency is refused when the dependency's next probe
 * plus the typical execution time lands after its deadline, or the probe is further away than the
 * run's wait share of its time: a quick honest answer beats a spinner. Batch work is admitted and
 * waits (it expires if the deadline passes first).
 */
export function dependencyRefusal(
  runClass: RunClass,
  open: readonly DependencyState[],
  deadline: number,
  now: number,
  serviceTimeMs: number | undefined,
  interactiveWaitShare = 1,
): AdmissionDecision | undefined {
  if (runClass !== 'interactive' || open.length === 0) return undefined;
  const latestRetry = Math.max(...open.map((d) => d.retryAt ?? now));
  if (latestRetry + (serviceTimeMs ?? 0) <= deadline && latestRetry - now <= (deadline - now) * interactiveWaitShare) return undefined;
  return { outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: retryAfterSeconds(latestRetry - now) };
}

/**
 * The most runs of a class that may be ahead of this one for it still to finish by its deadline:
 * it starts once the line ahead has shrunk below the class's slots, at the measured rate, then
 * needs its typical execution time. Undefined when nothing has been measured yet: a cold system
 * cannot estimate, and refusing on a guess would be dishonest.
 */
export function maxAheadForDeadline(opts: { deadline: number; now: number; slots: number; service: ServiceEstimate }): number | undefined {
  const { ratePerSec, serviceTimeMs } = opts.service;
  if (ratePerSec === undefined || serviceTimeMs === undefined || ratePerSec <= 0) return undefined;
  const spareMs = opts.deadline - opts.now - serviceTimeMs;
  if (spareMs < 0) return -1;
  return opts.slots - 1 + Math.floor((ratePerSec * spareMs) / 1000);
}

/**
 * The most of a tenant's runs (any class) that may be ahead of this one, running or waiting, for
 * it still to start within `waitBudgetMs`: the tenant's cap runs at once, each taking the measured
 * service time. Undefined when nothing has been measured yet.
 */
export function maxTenantAhead(opts: { cap: number; waitBudgetMs: number; serviceTimeMs: number | undefined }): number | undefined {
  const { cap, waitBudgetMs, serviceTimeMs } = opts;
  if (serviceTimeMs === undefined || serviceTimeMs <= 0) return undefined;
  if (waitBudgetMs < 0) return -1;
  return cap - 1 + Math.floor((cap * waitBudgetMs) / serviceTimeMs);
}

/**
 * How long a run would wait in line for its permits, from the runs ahead of it: of its class for
 * the class's slots, and of its tenant for the tenant's cap, each line served `slots` at a time at
 * the measured service time; the longer of the two. 0 when nothing has been measured yet.
 */
export function queueWaitMs(ahead: { classAhead: number; tenantAhead: number }, slots: { class: number; tenant: number }, serviceTimeMs: number | undefined): number {
  if (serviceTimeMs === undefined) return 0;
  const line = (n: number, s: number) => (Math.max(0, n - s + 1) * serviceTimeMs) / Math.max(1, s);
  return Math.max(line(ahead.classAhead, slots.class), line(ahead.tenantAhead, slots.tenant));
}

/** Time until the line ahead is short enough again for a run with the same budget to fit. */
export function waitUntilAheadFits(ahead: number, maxAhead: number, ratePerSec: number | undefined): number {
  if (!ratePerSec || ratePerSec <= 0) return Number.POSITIVE_INFINITY;
  return (Math.max(0, ahead - maxAhead) / ratePerSec) * 1000;
}

/** What the backlog script answered, with counts taken before this run. */
export interface BacklogResult {
  outcome: 'admitted' | 'tenant_full' | 'global_full' | 'too_late' | 'duplicate';
  tenantCount: number;
  classAhead: number;
  allCount: number;
}

/**
 * Turns the atomic backlog answer into the contract's outcome. A full tenant is the tenant's own
 * doing (429, come back when some of its runs finish); a full system or an unreachable deadline is
 * ours (503). Retry hints come from the measured service rate, or a conservative second.
 */
export function decideFromBacklog(r: BacklogResult, opts: { slots: number; maxAhead: number | undefined; service: ServiceEstimate }): AdmissionDecision {
  const rate = opts.service.ratePerSec;
  const perRunMs = rate && rate > 0 ? 1000 / rate : undefined;
  switch (r.outcome) {
    case 'tenant_full':
      return { outcome: 'deferred', reason: 'tenant_backlog_full', retryAfterSec: retryAfterSeconds(perRunMs ?? 1000) };
    case 'global_full':
      return { outcome: 'rejected', reason: 'overloaded', retryAfterSec: retryAfterSeconds(perRunMs ?? 1000) };
    case 'too_late':
      return { outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: retryAfterSeconds(waitUntilAheadFits(r.classAhead, opts.maxAhead ?? 0, rate)) };
    case 'admitted':
    case 'duplicate':
      if (r.classAhead < opts.slots) return { outcome: 'admitted', reason: 'capacity_available' };
      return { outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: r.classAhead - opts.slots + 1 };
  }
}

/** Measured service rate from per-bucket finish counts: full buckets of the window plus the current one. */
export function serviceRate(buckets: ReadonlyMap<number, number>, nowSec: number, bucketSec: number, windowSec: number): number | undefined {
  const current = Math.floor(nowSec / bucketSec);
  const full = Math.max(1, Math.floor(windowSec / bucketSec));
  let finished = 0;
  for (const [b, n] of buckets) if (b > current - 1 - full && b <= current) finished += n;
  const elapsedSec = full * bucketSec + (nowSec - current * bucketSec);
  return finished > 0 ? finished / elapsedSec : undefined;
}

/** The token bucket's answer as a decision; a bucket that never refills asks for an hour. */
export function bucketRefusal(take: { allowed: boolean; waitMs: number }): AdmissionDecision | undefined {
  if (take.allowed) return undefined;
  return { outcome: 'deferred', reason: 'rate_limited', retryAfterSec: take.waitMs < 0 ? 3600 : retryAfterSeconds(take.waitMs) };
}
