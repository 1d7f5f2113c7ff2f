import type { MetricObjectWithValues, MetricValue, MetricValueWithName } from 'prom-client';

/** prom-client's JSON form of one metric, as `registry.getMetricsAsJSON()` answers. */
export type MetricJson = MetricObjectWithValues<MetricValue<string> | MetricValueWithName<string>>;

/** A histogram's cumulative bucket counts, by upper bound (`+Inf` last). */
export interface Buckets {
  le: number[];
  counts: number[];
}

/** The counters the Overview charts, summed over their other labels, at one instant. */
export interface Tally {
  at: number;
  /** sluice_admission_total by outcome (admitted, queued, deferred, rejected). */
  admission: Record<string, number>;
  /** sluice_admission_total of deferred and rejected submissions, by reason (the problem code answered). */
  refusals: Record<string, number>;
  /** sluice_runs_finished_total by status. */
  finished: Record<string, number>;
  /** sluice_run_end_to_end_seconds by class, every terminal status together. */
  endToEnd: Record<string, Buckets>;
  deadLetters: Record<string, number>;
  leasesLost: number;
  retryBudgetExhausted: Record<string, number>;
}

const REFUSED = new Set(['deferred', 'rejected']);

function add(into: Record<string, number>, key: string | number | undefined, value: number): void {
  const k = String(key ?? '');
  into[k] = (into[k] ?? 0) + value;
}

/** The values of one metric in a registry's JSON (none when it is not registered). */
export function metricValues(metrics: readonly MetricJson[], name: string): MetricJson['values'] {
  return metrics.find((m) => m.name === name)?.values ?? [];
}

/** Reads a Tally out of a registry's JSON: the one place that knows which metrics the Overview uses. */
export function tallyOf(metrics: readonly MetricJson[], at: number): Tally {
  const t: Tally = { at, admission: {}, refusals: {}, finished: {}, endToEnd: {}, deadLetters: {}, leasesLost: 0, retryBudgetExhausted: {} };
  for (const v of metricValues(metrics, 'sluice_admission_total')) {
    add(t.admission, v.labels.outcome, v.value);
    if (REFUSED.has(String(v.labels.outcome))) add(t.refusals, v.labels.reason, v.value);
  }
  for (const v of metricValues(metrics, 'sluice_runs_finished_total')) add(t.finished, v.labels.status, v.value);
  for (const v of metricValues(metrics, 'sluice_dead_letters_total')) add(t.deadLetters, v.labels.reason, v.value);
  for (const v of metricValues(metrics, 'sluice_retry_budget_exhausted_total')) add(t.retryBudgetExhausted, v.labels.dependency, v.value);
  for (const v of metricValues(metrics, 'sluice_permit_leases_lost_total')) t.leasesLost += v.value;
  const bounds = new Map<string, Map<number, number>>();
  for (const v of metricValues(metrics, 'sluice_run_end_to_end_seconds')) {
    if (!('metricName' in v) || !v.metricName?.endsWith('_bucket')) continue;
    const le = v.labels.le === '+Inf' ? Infinity : Number(v.labels.le);
    const byLe = bounds.get(String(v.labels.class)) ?? new Map<number, number>();
    byLe.set(le, (byLe.get(le) ?? 0) + v.value);
    bounds.set(String(v.labels.class), byLe);
  }
  for (const [cls, byLe] of bounds) {
    const le = [...byLe.keys()].sort((a, b) => a - b);
    t.endToEnd[cls] = { le, counts: le.map((b) => byLe.get(b)!) };
  }
  return t;
}

/**
 * The q-quantile of the observations between two cumulative histograms, interpolated linearly in
 * its bucket as Prometheus's histogram_quantile does (the `+Inf` bucket answers its lower bound).
 * Null when nothing was observed in between.
 */
export function quantileBetween(before: Buckets | undefined, after: Buckets | undefined, q: number): number | null {
  if (!after) return null;
  const counts = after.counts.map((c, i) => c - (before?.le[i] === after.le[i] ? (before?.counts[i] ?? 0) : 0));
  const total = counts[counts.length - 1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  const i = counts.findIndex((c) => c >= rank);
  const upper = after.le[i]!;
  const lower = i > 0 ? after.le[i - 1]! : 0;
  if (upper === Infinity) return lower;
  const below = i > 0 ? counts[i - 1]! : 0;
  const inBucket = counts[i]! - below;
  return inBucket > 0 ? lower + ((upper - lower) * (rank - below)) / inBucket : upper;
}

/** Per-second increase of each key between two tallies' records; a counter that went down (a restart) counts from zero. */
function ratesBetween(before: Record<string, number>, after: Record<string, number>, seconds: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    const prev = before[k] ?? 0;
    out[k] = (v >= prev ? v - prev : v) / seconds;
  }
  return out;
}

/** The sum of a record's values. */
export function sumOf(r: Record<string, number>): number {
  return Object.values(r).reduce((a, b) => a + b, 0);
}

/** One point of the Overview's charts: rates over the interval ending at `at`, latencies in seconds. */
export interface OverviewPoint {
  at: number;
  admission: Record<string, number>;
  refusals: Record<string, number>;
  finished: Record<string, number>;
  p50: Record<string, number | null>;
  p99: Record<string, number | null>;
}

export function pointBetween(before: Tally, after: Tally): OverviewPoint {
  const seconds = Math.max(0.001, (after.at - before.at) / 1000);
  const classes = Object.keys(after.endToEnd);
  const q = (quantile: number) => Object.fromEntries(classes.map((c) => [c, quantileBetween(before.endToEnd[c], after.endToEnd[c], quantile)]));
  return {
    at: after.at,
    admission: ratesBetween(before.admission, after.admission, seconds),
    refusals: ratesBetween(before.refusals, after.refusals, seconds),
    finished: ratesBetween(before.finished, after.finished, seconds),
    p50: q(0.5),
    p99: q(0.99),
  };
}

/** The points between consecutive tallies (oldest first). */
export function pointsOf(tallies: readonly Tally[]): OverviewPoint[] {
  return tallies.slice(1).map((t, i) => pointBetween(tallies[i]!, t));
}

/** The newest tally at least `ms` older than the last one, or the oldest kept. */
export function tallyAgo(tallies: readonly Tally[], ms: number): Tally | undefined {
  const last = tallies[tallies.length - 1];
  if (!last) return undefined;
  for (let i = tallies.length - 1; i >= 0; i--) if (last.at - tallies[i]!.at >= ms) return tallies[i];
  return tallies[0];
}

/** Increase of a record's values over a span (restarts count from zero), summed. */
export function increaseOver(before: Record<string, number> | undefined, after: Record<string, number>): Record<string, number> {
  return ratesBetween(before ?? {}, after, 1);
}
