import { metricValues, type MetricJson } from './overview.js';

/** Permits of one scope (global, class:batch, tenant:<id>, workflow:<name>, dependency:<name>), cluster-wide. */
export interface PermitUse {
  scope: string;
  inUse: number;
  limit: number;
  /**
   * Seconds the longest-waiting run of this process's processor has waited for its run permits
   * (0: none waits). Only for the scopes the dispatcher tracks its waiting runs by: global (every
   * class) and class:<class>; absent for the others, and when no processor runs in this process.
   */
  oldestWaitingSec?: number;
}

export interface BackpressureGauges {
  /** Empty when the permits could not be read from Redis at this request. */
  permits: PermitUse[];
  /** Whether a processor runs in this process: paused partitions, held runs and waiting ages are only seen there. */
  processorHere: boolean;
  /** Partitions this process's consumers hold paused, by why (reasons with none left out). */
  paused: { reason: string; partitions: number }[];
  /** Runs this process holds because a dependency they need is open, by dependency, and by tenant within it. */
  held: { dependency: string; runs: number; tenants: Record<string, number> }[];
}

const QUEUE_AGE = 'sluice_processor_queue_oldest_age_seconds';

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
 * The Backpressure page's gauges out of a registry read right after its scrape-time reads: the
 * permit gauges are Redis's cluster-wide counts (see registerPermitGauges), the paused partitions,
 * held runs and waiting ages this process's own.
 */
export function backpressureGauges(metrics: readonly MetricJson[]): BackpressureGauges {
  const limits = summed(metrics, 'sluice_permit_limit', 'scope');
  const inUse = summed(metrics, 'sluice_permits_in_use', 'scope');
  const ages = new Map(metricValues(metrics, QUEUE_AGE).map((v) => [String(v.labels.class), v.value]));
  const processorHere = ages.size > 0;
  const oldest = (scope: string): number | undefined => {
    if (!processorHere) return undefined;
    if (scope === 'global') return Math.max(...ages.values());
    return scope.startsWith('class:') ? ages.get(scope.slice('class:'.length)) : undefined;
  };
  return {
    permits: [...limits].map(([scope, limit]) => {
      const age = oldest(scope);
      return { scope, inUse: inUse.get(scope) ?? 0, limit, ...(age !== undefined ? { oldestWaitingSec: age } : {}) };
    }),
    processorHere,
    paused: [...summed(metrics, 'sluice_processor_paused_partitions', 'reason')].filter(([, partitions]) => partitions > 0).map(([reason, partitions]) => ({ reason, partitions })),
    held: heldByDependency(metrics),
  };
}
