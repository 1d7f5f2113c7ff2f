import type { MetricObjectWithValues, MetricValue, MetricValueWithName } from 'prom-client';
import type { FinishedRunsRow, FinishedWindow } from '../../status/finished-runs.js';

/** How far back the Overview's charts reach. */
export const OVERVIEW_SPAN_MS = 15 * 60_000;

/** prom-client's JSON form of one metric, as `registry.getMetricsAsJSON()` answers. */
export type MetricJson = MetricObjectWithValues<MetricValue<string> | MetricValueWithName<string>>;

/** The counters the Overview charts, summed over their other labels, at one instant. */
export interface Tally {
  at: number;
  /** sluice_admission_total by outcome (admitted, queued, deferred, rejected). */
  admission: Record<string, number>;
  /** sluice_admission_total of deferred and rejected submissions, by reason (the problem code answered). */
  refusals: Record<string, number>;
  deadLetters: Record<string, number>;
  leasesLost: number;
  retryBudgetExhausted: Record<string, number>;
  /** sluice_provider_calls_wasted_total, keyed `dependency reason` (see spendKey). */
  wasted: Record<string, number>;
  /** sluice_pacing_turns_total, keyed `dependency tenant`. */
  turns: Record<string, number>;
}

/** The key of a two-label series in a Tally's record: the two values, NUL-separated (neither can hold one: both come from config). */
export const spendKey = (a: string, b: string) => `${a}\u0000${b}`;

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
  const t: Tally = { at, admission: {}, refusals: {}, deadLetters: {}, leasesLost: 0, retryBudgetExhausted: {}, wasted: {}, turns: {} };
  for (const v of metricValues(metrics, 'sluice_admission_total')) {
    add(t.admission, v.labels.outcome, v.value);
    if (REFUSED.has(String(v.labels.outcome))) add(t.refusals, v.labels.reason, v.value);
  }
  for (const v of metricValues(metrics, 'sluice_dead_letters_total')) add(t.deadLetters, v.labels.reason, v.value);
  for (const v of metricValues(metrics, 'sluice_retry_budget_exhausted_total')) add(t.retryBudgetExhausted, v.labels.dependency, v.value);
  for (const v of metricValues(metrics, 'sluice_permit_leases_lost_total')) t.leasesLost += v.value;
  for (const v of metricValues(metrics, 'sluice_provider_calls_wasted_total')) add(t.wasted, spendKey(String(v.labels.dependency), String(v.labels.reason)), v.value);
  for (const v of metricValues(metrics, 'sluice_pacing_turns_total')) add(t.turns, spendKey(String(v.labels.dependency), String(v.labels.tenant)), v.value);
  return t;
}

/** What one dependency's calls went to over the Overview's span, as this process's processors counted them. */
export interface DependencySpend {
  /** Calls wasted on runs that ended without a real answer, by how they ended. */
  wasted: Record<string, number>;
  /** Provider turns booked, by tenant. */
  turns: Record<string, number>;
}

/**
 * Each dependency's wasted calls and turns over the last OVERVIEW_SPAN_MS of tallies (restarts
 * count from zero): the counters are the processors', so only those in this process are seen.
 */
export function dependencySpend(tallies: readonly Tally[]): Record<string, DependencySpend> {
  const last = tallies[tallies.length - 1];
  if (!last) return {};
  const before = tallyAgo(tallies, OVERVIEW_SPAN_MS);
  const out: Record<string, DependencySpend> = {};
  const into = (record: Record<string, number>, part: keyof DependencySpend) => {
    for (const [key, n] of Object.entries(record)) {
      const [dependency, label] = key.split('\u0000') as [string, string];
      if (n > 0) (out[dependency] ??= { wasted: {}, turns: {} })[part][label] = n;
    }
  };
  into(increaseOver(before === last ? undefined : before?.wasted, last.wasted), 'wasted');
  into(increaseOver(before === last ? undefined : before?.turns, last.turns), 'turns');
  return out;
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

/** One point of the admission charts: this API process's rates over the interval ending at `at`. */
export interface OverviewPoint {
  at: number;
  admission: Record<string, number>;
  refusals: Record<string, number>;
}

export function pointBetween(before: Tally, after: Tally): OverviewPoint {
  const seconds = Math.max(0.001, (after.at - before.at) / 1000);
  return {
    at: after.at,
    admission: ratesBetween(before.admission, after.admission, seconds),
    refusals: ratesBetween(before.refusals, after.refusals, seconds),
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

/** One point of the finished-run charts: every instance's runs that finished in the bucket ending at `at`, from Postgres. */
export interface FinishedPoint {
  at: number;
  /** Runs finished per second, by terminal status. */
  finished: Record<string, number>;
  /** Runs completed on time per second: a real answer by the deadline (goodput, as sluice_runs_on_time_total counts it). */
  onTime: number;
  /** Seconds from admission to finish, by class; null for a class with no run finished in the bucket. */
  p50: Record<string, number | null>;
  p99: Record<string, number | null>;
}

/** The finished-run charts as the Overview's JSON carries them. */
export interface FinishedSeries {
  points: FinishedPoint[];
  /** When the points were read (epoch ms); null until a read has answered. */
  asOf: number | null;
  /** Why the last read failed (the points, if any, are those read at `asOf`); null when it answered. */
  unavailable: string | null;
}

/** The whole buckets of the Overview's span before `now`: the bucket still filling is left out, so its rate does not read low. */
export function finishedWindow(now: number, bucketMs: number): FinishedWindow {
  const toMs = Math.floor(now / bucketMs) * bucketMs;
  return { fromMs: toMs - Math.ceil(OVERVIEW_SPAN_MS / bucketMs) * bucketMs, toMs, bucketMs };
}

/**
 * A point per bucket of the window, oldest first. A status seen anywhere in the window reads 0 in
 * a bucket without it (a quiet bucket is a zero, not a gap); a class's percentiles are null there.
 */
export function finishedPointsOf(rows: readonly FinishedRunsRow[], window: FinishedWindow): FinishedPoint[] {
  const statuses = [...new Set(rows.flatMap((r) => (r.status === null ? [] : [r.status])))];
  const classes = [...new Set(rows.flatMap((r) => (r.class === null ? [] : [r.class])))];
  const byBucket = new Map<number, FinishedRunsRow[]>();
  for (const r of rows) {
    const inBucket = byBucket.get(r.bucketMs);
    if (inBucket) inBucket.push(r);
    else byBucket.set(r.bucketMs, [r]);
  }
  const seconds = window.bucketMs / 1000;
  const points: FinishedPoint[] = [];
  for (let start = window.fromMs; start < window.toMs; start += window.bucketMs) {
    const point: FinishedPoint = {
      at: start + window.bucketMs,
      finished: Object.fromEntries(statuses.map((s) => [s, 0])),
      onTime: 0,
      p50: Object.fromEntries(classes.map((c) => [c, null])),
      p99: Object.fromEntries(classes.map((c) => [c, null])),
    };
    for (const r of byBucket.get(start) ?? []) {
      if (r.status !== null) {
        point.finished[r.status] = r.runs / seconds;
        point.onTime += r.onTime / seconds;
      }
      else if (r.class !== null) {
        point.p50[r.class] = r.p50;
        point.p99[r.class] = r.p99;
      }
    }
    points.push(point);
  }
  return points;
}
