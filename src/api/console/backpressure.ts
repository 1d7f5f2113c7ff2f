import { PROCESSOR_STATE_EVERY_MS, type ClusterProcessorState, type HeldRuns, type PausedPartitions } from '../../processors/processor-state.js';
import { metricValues, type MetricJson } from './overview.js';

/** Permits of one scope (global, class:batch, tenant:<id>, workflow:<name>, dependency:<name>), cluster-wide. */
export interface PermitUse {
  scope: string;
  inUse: number;
  limit: number;
  /**
   * Seconds the longest waiter for this scope has waited, across every processor, as they last
   * published it: a run in a processor's line for its run permits counts for each scope it needs
   * (global, its class's, its tenant's and its workflow's), a call waiting for a dependency's
   * permit for the dependency. Absent when none waits, and when the processors' state could not
   * be read (`processorState.why`).
   */
  oldestWaitingSec?: number;
}

export interface BackpressureGauges {
  /** Empty when the permits could not be read from Redis at this request. */
  permits: PermitUse[];
  /**
   * How often every processor publishes its waiters, paused partitions and held runs (the most
   * those figures lag behind), and why they are unknown, if they are.
   */
  processorState: { everySec: number; why: string | null };
  /** Partitions paused by every processor, by why (reasons with none left out). */
  paused: PausedPartitions[];
  /** Runs every processor holds because a dependency they need is open, by dependency, and by tenant within it. */
  held: HeldRuns[];
}

function summed(metrics: readonly MetricJson[], name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const v of metricValues(metrics, name)) out.set(String(v.labels[label]), (out.get(String(v.labels[label])) ?? 0) + v.value);
  return out;
}

/**
 * The Backpressure page's gauges out of a registry read right after its scrape-time reads (the
 * permit gauges are Redis's cluster-wide counts, see registerPermitGauges), and what every
 * processor published of its state, or why that could not be read.
 */
export function backpressureGauges(metrics: readonly MetricJson[], processors: ClusterProcessorState | string): BackpressureGauges {
  const limits = summed(metrics, 'sluice_permit_limit', 'scope');
  const inUse = summed(metrics, 'sluice_permits_in_use', 'scope');
  const known = typeof processors === 'string' ? undefined : processors;
  return {
    permits: [...limits].map(([scope, limit]) => {
      const age = known?.oldestWaitingSec.get(scope);
      return { scope, inUse: inUse.get(scope) ?? 0, limit, ...(age !== undefined ? { oldestWaitingSec: age } : {}) };
    }),
    processorState: { everySec: PROCESSOR_STATE_EVERY_MS / 1000, why: typeof processors === 'string' ? processors : null },
    paused: known?.paused ?? [],
    held: known?.held ?? [],
  };
}
