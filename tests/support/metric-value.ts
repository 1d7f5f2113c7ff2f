import type { Counter, Gauge } from 'prom-client';

/** The value of one series of a metric (0 when it has none yet), picked by its labels. */
export async function metricValue(metric: Counter<string> | Gauge<string>, labels: Record<string, string>): Promise<number> {
  const { values } = await metric.get();
  const series = values.find((v) => Object.entries(labels).every(([k, l]) => (v.labels as Record<string, unknown>)[k] === l));
  return series?.value ?? 0;
}
