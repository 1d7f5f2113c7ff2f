import type { AdaptiveConcurrencyConfig, DependencyConfig } from '../config/schema.js';
import { StepError } from '../steps/step-error.js';

/** What one finished call says of a dependency's load: back off, or it coped. */
export type LoadSignal = 'congestion' | 'success';

/** The range a dependency's adaptive figure moves in: `max` defaults to its permit limit in config. */
export interface AdaptiveBounds {
  min: number;
  max: number;
}

export function adaptiveBounds(dep: Pick<DependencyConfig, 'maxConcurrency'> & { adaptiveConcurrency?: AdaptiveConcurrencyConfig }): AdaptiveBounds | undefined {
  const adaptive = dep.adaptiveConcurrency;
  return adaptive && { min: adaptive.min, max: adaptive.max ?? dep.maxConcurrency };
}

/**
 * 429 (too many requests), 408 (it gave up waiting for our request), 503 (unavailable) and 529
 * (Anthropic's overloaded): the dependency saying it has more than it can take now.
 */
const BUSY_STATUSES: ReadonlySet<number> = new Set([408, 429, 503, 529]);

/**
 * The signal a call gives its dependency's adaptive figure, from how it ended and how long it
 * took once it held its permit. Busy answers and timeouts are congestion, and so is a success
 * slower than the latency target: queueing shows in latency before it shows in errors. A success
 * in time is room to grow. Anything else says nothing of load: the other errors (broken
 * connections, 5xx, our own bad request, an unreadable answer) are the breaker's to judge, and a
 * call we ended ourselves (deadline, cancellation) or that failed outside the dependency, none.
 */
export function loadSignalOf(error: unknown, callMs: number, latencyTargetMs: number | undefined): LoadSignal | undefined {
  if (error === undefined) return latencyTargetMs !== undefined && callMs > latencyTargetMs ? 'congestion' : 'success';
  if (!(error instanceof StepError)) return undefined;
  switch (error.kind) {
    case 'connect_timeout':
    case 'read_timeout':
    case 'total_timeout':
      return 'congestion';
    case 'http_status':
      return error.status !== undefined && BUSY_STATUSES.has(error.status) ? 'congestion' : undefined;
    case 'connection':
    case 'bad_response':
    case 'deadline':
      return undefined;
  }
}

/**
 * A dependency's cap in force: its permit limit at its ramp-up share, held to its adaptive figure
 * (`max` while none is stored), rounded down. permits-acquire.lua applies the same rule.
 */
export function effectiveDependencyLimit(limitAtRamp: number, bounds: AdaptiveBounds | undefined, figure: number | undefined): number {
  if (!bounds) return limitAtRamp;
  return Math.min(limitAtRamp, Math.floor(Math.min(bounds.max, figure ?? bounds.max) + 1e-9));
}
