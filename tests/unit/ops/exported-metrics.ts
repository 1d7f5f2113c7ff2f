import { loadConfig } from '../../../src/config/load.js';
import { createLagMetrics } from '../../../src/lag/lag-metrics.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { registerPermitGauges } from '../../../src/permits/permit-metrics.js';
import { redisKeys } from '../../../src/redis/keys.js';

type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary';
interface MetricFamily {
  name: string;
  type: MetricType;
  labels: string[];
}

/** Every metric family Sluice registers, from the registries themselves (built in-process, no I/O). */
async function registeredFamilies(): Promise<MetricFamily[]> {
  const metrics = createMetrics();
  const config = loadConfig({ env: {} });
  registerPermitGauges(metrics, { pipeline: () => { throw new Error('not scraped here'); } } as never, redisKeys(config.namespace), config);
  createLagMetrics(metrics.registry);
  // prom-client keeps a metric's label names on the metric, without declaring them in its types.
  const labelNames = (name: string) => (metrics.registry.getSingleMetric(name) as unknown as { labelNames?: string[] } | undefined)?.labelNames ?? [];
  return (await metrics.registry.getMetricsAsJSON()).map((m) => ({ name: m.name, type: String(m.type) as MetricType, labels: [...labelNames(m.name)] }));
}

/** Labels Prometheus attaches to every scraped series. */
const TARGET_LABELS = ['job', 'instance'];

/**
 * The series names a query may select, each with the labels it carries: a histogram's `_bucket`
 * (with `le`), `_sum` and `_count`, a summary's quantiles, `_sum` and `_count`.
 */
export async function exportedMetricNames(): Promise<Map<string, Set<string>>> {
  const families = new Map((await registeredFamilies()).map((f) => [f.name, f]));
  const series = new Map<string, Set<string>>();
  const add = (name: string, labels: string[]) => series.set(name, new Set([...labels, ...TARGET_LABELS]));
  for (const { name, type, labels } of families.values()) {
    if (type === 'histogram') add(`${name}_bucket`, [...labels, 'le']);
    if (type === 'summary') add(name, [...labels, 'quantile']);
    if (type === 'histogram' || type === 'summary') {
      add(`${name}_sum`, labels);
      add(`${name}_count`, labels);
    } else add(name, labels);
  }
  return series;
}
