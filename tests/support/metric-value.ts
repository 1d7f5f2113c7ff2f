import type { Counter, Gauge, Histogram } from 'prom-client';

const hasLabels = (series: Record<string, unknown>, labels: Record<string, string>) => Object.entries(labels).every(([k, l]) => series[k] === l);

/** The value of one series of a metric (0 when it has none yet), picked by its labels. */
export async function metricValue(metric: Counter<string> | Gauge<string>, labels: Record<string, string>): Promise<number> {
  const { values } = await metric.get();
  const series = values.find((v) => hasLabels(v.labels, labels));
  return series?.value ?? 0;
}

/** How many observations one series of a histogram has and their sum (0 and 0 when it has none yet), picked by its labels. */
export async function histogramValue(metric: Histogram<string>, labels: Record<string, string>): Promise<{ count: number; sum: number }> {
  const { name, values } = await metric.get();
  const pick = (suffix: '_count' | '_sum') => values.find((v) => v.metricName === `${name}${suffix}` && hasLabels(v.labels, labels))?.value ?? 0;
  return { count: pick('_count'), sum: pick('_sum') };
}

/** The value of one series in a Prometheus text scrape, or undefined when the scrape has none. */
export function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
