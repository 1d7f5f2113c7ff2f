import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig } from '../config/schema.js';
import type { DependencyStep } from '../config/workflows.js';
import type { RunClass } from '../events/schemas.js';
import { MIN_USEFUL_CALL_MS } from '../runs/deadline.js';
import { retryAfterSeconds, type AdmissionDecision } from './admission-policy.js';

/**
 * Whether a run can get the provider turns it needs before its deadline, as plain functions: the
 * turns its calls need, how long it may wait for them at the door, and the answer when they come
 * too late. The turns themselves are reserved by `DependencyPacer.bookTurns` in one script per
 * dependency, so what is predicted is also what is booked.
 */

/**
 * Calls a run of the workflow makes to each dependency that may be rate limited, before it could
 * finish: one per LLM step and per tool step, an agent step's first model turn (its later turns
 * and its tool calls are booked turn by turn, as the model asks for them). A dependency with
 * neither a rate limit nor the chance of one its provider reports (an LLM) is left out.
 */
export function turnsNeeded(steps: readonly DependencyStep[], dependencies: Readonly<Record<string, DependencyConfig>>): Map<string, number> {
  const out = new Map<string, number>();
  for (const step of steps) {
    const name = step.kind === 'tool' ? step.tool : step.dependency;
    const dep = ownEntry(dependencies, name);
    const limited = dep !== undefined && (dep.kind === 'llm' || dep.rateLimit?.requestsPerMinute !== undefined || dep.rateLimit?.requestsPerSecond !== undefined);
    if (!limited) continue;
    out.set(name, (out.get(name) ?? 0) + 1);
  }
  return out;
}

/**
 * The longest a run may wait for its turns and still finish by its deadline: its time left less
 * what its calls take once they go (the measured service time, else a useful call's minimum per
 * call). An interactive run waits at most `interactiveWaitShare` of its time left, so a queue
 * never stands at the deadline: what cannot be answered fast is refused fast.
 */
export function turnWaitBound(opts: { runClass: RunClass; now: number; deadline: number; calls: number; serviceTimeMs: number | undefined; interactiveWaitShare: number }): number {
  const left = opts.deadline - opts.now;
  const service = opts.serviceTimeMs ?? opts.calls * MIN_USEFUL_CALL_MS;
  const bound = left - service;
  return opts.runClass === 'interactive' ? Math.min(bound, left * opts.interactiveWaitShare) : bound;
}

/**
 * How long a run may wait for the turns it reserves at the door, and beyond what wait it is
 * refused. An interactive run reserves within its bound or is refused. A batch run reserves only
 * turns due within `maxInlineWaitMs`, the wait a processor would hold a call for: further away it
 * is admitted without them and books its calls as it goes, so the batch backlog does not take, in
 * order of arrival, the turns later interactive runs need (a batch call waits for a fuller bucket
 * when it books); it is refused only when its turns come too late for its deadline even so.
 */
export function turnWaits(opts: Parameters<typeof turnWaitBound>[0] & { maxInlineWaitMs: number }): { reserveWithinMs: number; refuseBeyondMs: number } {
  const bound = turnWaitBound(opts);
  return opts.runClass === 'interactive' ? { reserveWithinMs: bound, refuseBeyondMs: bound } : { reserveWithinMs: Math.min(bound, opts.maxInlineWaitMs), refuseBeyondMs: bound };
}

/** What a dependency's pacing answered for a run's turns: booked or not, the wait they need, and whether the tenant's share is what holds them. */
export interface TurnAnswer {
  reserved: boolean;
  waitMs: number;
  heldByShare: boolean;
}

/**
 * The refusal of a run whose turns come after the most it may wait: a tenant over its fair share
 * is told to slow down (429 `rate_limited`), any other run that it cannot finish in time (503
 * `deadline_unreachable`). Retry after the time by which the same turns would come within the
 * same bound, if nobody else took any meanwhile.
 */
export function turnRefusal(answer: TurnAnswer, maxWaitMs: number): AdmissionDecision | undefined {
  if (answer.reserved) return undefined;
  const retryAfterSec = retryAfterSeconds(answer.waitMs - Math.max(0, maxWaitMs));
  return answer.heldByShare ? { outcome: 'deferred', reason: 'rate_limited', retryAfterSec } : { outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec };
}
