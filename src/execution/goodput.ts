import type { DependencyConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';

/**
 * How a run ended, as goodput tells ends apart: `completed` with a real answer, `degraded` (its
 * answer is a fallback stand-in), `failed` (a step's dependency or output), `dead_lettered` (ended
 * without its steps deciding: an unknown tenant or workflow, attempts failing on the
 * infrastructure), `expired` or `cancelled`.
 */
export type RunEnd = 'completed' | 'degraded' | 'failed' | 'dead_lettered' | 'expired' | 'cancelled';

/** Why a run's provider calls were spent for nothing: every end but a real answer. */
export type WasteReason = Exclude<RunEnd, 'completed'>;

/** What one run's end adds to the goodput counters. */
export interface EndCounts {
  onTime: boolean;
  degraded: boolean;
  wasted: { dependency: string; reason: WasteReason; calls: number }[];
}

/**
 * The calls a run's end is judged by: those that spend a provider's limited capacity, i.e. LLM
 * calls and calls to any dependency paced by a rate limit. Unpaced tools are not scarce, and a run
 * that ends without an answer wastes nothing anyone else could have had.
 */
export function isProviderCall(dep: Pick<DependencyConfig, 'kind' | 'rateLimit'>): boolean {
  return dep.kind === 'llm' || dep.rateLimit !== undefined;
}

/**
 * A run's end, judged: on time when it completed with a real answer no later than its deadline;
 * otherwise (a late real answer aside) its provider calls over all its attempts were wasted.
 */
export function endCounts(end: RunEnd, finishedAt: number, deadline: number, calls: ReadonlyMap<string, number>): EndCounts {
  const real = end === 'completed';
  return {
    onTime: real && finishedAt <= deadline,
    degraded: end === 'degraded',
    wasted: real ? [] : [...calls].flatMap(([dependency, n]) => (n > 0 ? [{ dependency, reason: end, calls: n }] : [])),
  };
}

/** Adds a run's end to the goodput counters. */
export function countEnd(metrics: Pick<Metrics, 'runsOnTime' | 'runsDegraded' | 'providerCallsWasted'>, run: Pick<RunRequested, 'tenantId' | 'workflow' | 'class'>, counts: EndCounts): void {
  const labels = { tenant: run.tenantId, workflow: run.workflow, class: run.class };
  if (counts.onTime) metrics.runsOnTime.inc(labels);
  if (counts.degraded) metrics.runsDegraded.inc(labels);
  for (const w of counts.wasted) metrics.providerCallsWasted.inc({ dependency: w.dependency, reason: w.reason }, w.calls);
}

/**
 * The provider calls of each attempt in progress, counted as they go out, until the attempt ends
 * and adds them to the run's record (RunProgress). Keyed by the event object, as the outcome
 * publisher keys attempts: an attempt repeated after an infrastructure failure keeps its object,
 * so calls of the failed tries are kept with it.
 */
export class AttemptCalls {
  private readonly calls = new WeakMap<RunRequested, Map<string, number>>();

  add(run: RunRequested, dependency: string): void {
    const calls = this.calls.get(run) ?? new Map<string, number>();
    calls.set(dependency, (calls.get(dependency) ?? 0) + 1);
    this.calls.set(run, calls);
  }

  /** The attempt's calls so far, forgotten here: they now belong to whoever records them. */
  take(run: RunRequested): ReadonlyMap<string, number> {
    const calls = this.calls.get(run) ?? new Map<string, number>();
    this.calls.delete(run);
    return calls;
  }
}
