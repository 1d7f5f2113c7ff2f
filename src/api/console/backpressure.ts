import { metricValues, type MetricJson } from './overview.js';

/** Permits of one scope (global, class:batch, tenant:<id>, workflow:<name>, dependency:<name>), cluster-wide. */
export interface PermitUse {
  scope: string;
  inUse: number;
  limit: number;
}

export interface BackpressureGauges {
  /** Empty when the permits could not be read from Redis at this request. */
  permits: PermitUse[];
  /** Partitions this process's consumers hold paused, by why (reasons with none left out). */
  paused: { reason: string; partitions: number }[];
  /** Runs this process holds because a dependency they need is open, by dependency. */
  held: { dependency: string; runs: number }[];
}

function summed(metrics: readonly MetricJson[], name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const v of metricValues(metrics, name)) out.set(String(v.labels[label]), (out.get(String(v.labels[label])) ?? 0) + v.value);
  return out;
}

/**
 * The Backpressure page's gauges out of a registry read right after its scrape-time reads: the
 * permit gauges are Redis's cluster-wide counts (see registerPermitGauges), the paused partitions
 * and held runs this process's own.
 */
export function backpressureGauges(metrics: readonly MetricJson[]): BackpressureGauges {
  const limits = summed(metrics, 'sluice_permit_limit', 'scope');
  const inUse = summed(metrics, 'sluice_permits_in_use', 'scope');
  return {
    permits: [...limits].map(([scope, limit]) => ({ scope, inUse: inUse.get(scope) ?? 0, limit })),
    paused: [...summed(metrics, 'sluice_processor_paused_partitions', 'reason')].filter(([, partitions]) => partitions > 0).map(([reason, partitions]) => ({ reason, partitions })),
    held: [...summed(metrics, 'sluice_processor_runs_held', 'dependency')].filter(([, runs]) => runs > 0).map(([dependency, runs]) => ({ dependency, runs })),
  };
}
