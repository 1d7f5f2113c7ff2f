import { OLDEST_WAITERS_EVERY_MS } from '../../permits/oldest-waiters-store.js';
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
   * permit for the dependency. Absent when none waits, and when the waiters could not be read
   * (`oldestWaiters.why`).
   */
  oldestWaitingSec?: number;
}

export interface BackpressureGauges {
  /** Empty when the permits could not be read from Redis at this request. */
  permits: PermitUse[];
  /** How often every processor publishes its waiters (the most the figures lag behind), and why they are unknown, if they are. */
  oldestWaiters: { everySec: number; why: string | null };
  /** Whether a processor runs in this process: paused partitions and held runs are only seen there. */
  processorHere: boolean;
  /** Partitions this process's consumers hold paused, by why (reasons with none left out). */
  paused: { reason: string; partitions: number }[];
  /** Runs this process holds because a dependency they need is open, by dependency, and by tenant within it. */
  held: { dependency: string; runs: number; tenants: Record<string, number> }[];
}

function summed(metrics: readonly MetricJson[], name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const v of metricValues(metrics, name)) out.set(String(v.labels[label]), (out.get(String(v.labels[label])) ?? 0) + v.value);
  return out;
}

function heldByDependency(metrics: readonly MetricJson[]): BackpressureGauges['held'] {
  const out = new Map<string, { dependency: string; runs: number; tenants: Record<string, number> }>();
  for (const v of metricValues(metrics, 'sluice_processor_runs_held')) {
    if (v.value <= 0) continue;
    const dependency = String(v.labels.dependency);
    const entry = out.get(dependency) ?? { dependency, runs: 0, tenants: {} };
    const tenant = String(v.labels.tenant);
    entry.runs += v.value;
    entry.tenants[tenant] = (entry.tenants[tenant] ?? 0) + v.value;
    out.set(dependency, entry);
  }
  return [...out.values()];
}

/**
 * The Backpressure page's gauges out of a registry read right after its scrape-time reads, and
 * the oldest waiters every processor published (or why they could not be read): the permit
 * gauges are Redis's cluster-wide counts (see registerPermitGauges), the paused partitions and
 * held runs this process's own.
 */
export function backpressureGauges(metrics: readonly MetricJson[], oldestWaiting: ReadonlyMap<string, number> | string): BackpressureGauges {
  const limits = summed(metrics, 'sluice_permit_limit', 'scope');
  const inUse = summed(metrics, 'sluice_permits_in_use', 'scope');
  const ages = typeof oldestWaiting === 'string' ? new Map<string, number>() : oldestWaiting;
  return {
    permits: [...limits].map(([scope, limit]) => {
      const age = ages.get(scope);
      return { scope, inUse: inUse.get(scope) ?? 0, limit, ...(age !== undefined ? { oldestWaitingSec: age } : {}) };
    }),
    oldestWaiters: { everySec: OLDEST_WAITERS_EVERY_MS / 1000, why: typeof oldestWaiting === 'string' ? oldestWaiting : null },
    // The processor's own gauges are in this registry only when it runs in this process.
    processorHere: metricValues(metrics, 'sluice_processor_queue_oldest_age_seconds').length > 0,
    paused: [...summed(metrics, 'sluice_processor_paused_partitions', 'reason')].filter(([, partitions]) => partitions > 0).map(([reason, partitions]) => ({ reason, partitions })),
    held: heldByDependency(metrics),
  };
}
