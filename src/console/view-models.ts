/**
 * What each console page shows, computed from the console API's JSON by plain functions: the
 * components only lay these out, and these are what the unit tests check.
 */
import type { ActiveAlert, PendingAlert } from '../api/console/alerts.js';
import type { PermitUse } from '../api/console/backpressure.js';
import type { PausedPartitions } from '../processors/processor-state.js';
import type { FinishedPoint, FinishedSeries, OverviewPoint } from '../api/console/overview.js';
import type { LimitView } from '../api/routes/admin-limits.js';
import type { LagReport } from '../lag/lag-report.js';
import type { RunEvent } from '../client/types.js';

/** A chart's series in uPlot's shape: x in epoch seconds first, then one array per label. */
export interface ChartData {
  labels: string[];
  data: [number[], ...(number | null)[][]];
}

/**
 * One chart's series out of the Overview's points (this process's, or Postgres's): `pick` gives
 * each point's values by label; a label missing from a point (no such counter yet) is null there,
 * so the line has a gap. `order` puts known labels first, in that order; others follow by name.
 */
export function chartData<P extends { at: number }>(points: readonly P[], pick: (p: P) => Record<string, number | null>, order: readonly string[] = []): ChartData {
  const seen = new Set<string>();
  for (const p of points) for (const k of Object.keys(pick(p))) seen.add(k);
  const labels = [...order.filter((k) => seen.has(k)), ...[...seen].filter((k) => !order.includes(k)).sort()];
  const xs = points.map((p) => Math.round(p.at / 1000));
  const ys = labels.map((l) => points.map((p) => pick(p)[l] ?? null));
  return { labels, data: [xs, ...ys] };
}

export const ADMISSION_OUTCOMES = ['admitted', 'queued', 'deferred', 'rejected'] as const;

/** Latency series named `<class> p50` and `<class> p99`, in seconds. */
export function latencyPick(p: FinishedPoint): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [cls, v] of Object.entries(p.p50)) out[`${cls} p50`] = v;
  for (const [cls, v] of Object.entries(p.p99)) out[`${cls} p99`] = v;
  return out;
}

/** How far back the figures above the charts average: one burst stays visible between two refreshes. */
export const FIGURE_SPAN_MS = 60_000;

/** The mean per-second rate over the last minute of points ('–' before the first point). */
function recentRate<P extends { at: number }>(points: readonly P[], pick: (p: P) => number | undefined): string {
  const last = points[points.length - 1];
  if (!last) return '–';
  const recent = points.filter((p) => last.at - p.at < FIGURE_SPAN_MS);
  return `${formatNumber(recent.reduce((sum, p) => sum + (pick(p) ?? 0), 0) / recent.length)}/s`;
}

/** The share of the last minute's completions that were on time ('–' when none completed). */
function recentOnTimeShare(points: readonly FinishedPoint[]): string {
  const last = points[points.length - 1];
  const recent = last ? points.filter((p) => last.at - p.at < FIGURE_SPAN_MS) : [];
  const completed = recent.reduce((sum, p) => sum + (p.finished.completed ?? 0), 0);
  return completed > 0 ? `${Math.round((100 * recent.reduce((sum, p) => sum + p.onTime, 0)) / completed)}%` : '–';
}

/**
 * The figures above the charts: admissions from this process's points, completions and on-time
 * goodput from Postgres's, each over its last minute; those read 'unavailable' while Postgres
 * does not answer, rather than a stale rate.
 */
export function latestFigures(points: readonly OverviewPoint[], finished: FinishedSeries): { label: string; value: string }[] {
  const fromPostgres = (value: () => string) => (finished.unavailable === null ? value() : 'unavailable');
  return [
    ...ADMISSION_OUTCOMES.map((o) => ({ label: o, value: recentRate(points, (p) => p.admission[o]) })),
    { label: 'completed', value: fromPostgres(() => recentRate(finished.points, (p) => p.finished.completed)) },
    { label: 'on time', value: fromPostgres(() => recentRate(finished.points, (p) => p.onTime)) },
    { label: 'completions on time', value: fromPostgres(() => recentOnTimeShare(finished.points)) },
  ];
}

/** The finished-runs chart's series: runs by terminal status, and among the completed those on time. */
export function finishedPick(p: FinishedPoint): Record<string, number> {
  return { ...p.finished, 'on time': p.onTime };
}

export const FINISHED_ORDER = ['completed', 'on time', 'failed', 'expired', 'cancelled', 'dead_lettered'] as const;

/** What the page says of the finished-run charts' source: null while Postgres answers. */
export function finishedNotice(finished: FinishedSeries): string | null {
  if (finished.unavailable === null) return null;
  const shown = finished.asOf === null ? 'nothing to show yet' : `the charts show what it answered at ${new Date(finished.asOf).toISOString().slice(11, 19)} UTC`;
  return `Finished runs and end-to-end times are unavailable: Postgres did not answer (${finished.unavailable}); ${shown}.`;
}

export function formatNumber(n: number): string {
  if (n === 0) return '0';
  if (Math.abs(n) >= 100) return String(Math.round(n));
  if (Math.abs(n) >= 10) return n.toFixed(1);
  return n.toFixed(2);
}

/** Seconds as a person reads them: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min. */
export function formatSeconds(s: number): string {
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  // Rounded first: 899.6 s is 15 min 0 s, not 14 min 60 s.
  if (s < 3600 - 0.5) {
    const whole = Math.round(s);
    return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  }
  const minutes = Math.round(s / 60);
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

export interface AlertBanner {
  level: 'critical' | 'warning' | 'info';
  lines: string[];
}

/** The banner over every page: the worst severity present, with every alert's summary; none when all is well. */
export function alertBanner(alerts: readonly ActiveAlert[]): AlertBanner | undefined {
  if (alerts.length === 0) return undefined;
  const level = alerts.some((a) => a.severity === 'critical') ? 'critical' : alerts.some((a) => a.severity === 'warning') ? 'warning' : 'info';
  return { level, lines: alerts.map((a) => `${a.alert}: ${a.summary}`) };
}

/** Conditions that hold but not yet for their rule's `for:`: the banner shows them once they have. */
export function pendingLines(pending: readonly PendingAlert[], now: number): string[] {
  return pending.map((p) => `pending: ${p.alert} (${p.summary}), held ${formatSeconds(Math.max(0, now - p.since) / 1000)} of ${formatSeconds(p.forMs / 1000)}`);
}

export interface LagRow {
  group: string;
  topic: string;
  partition: number;
  lagMessages: string;
  lagSeconds: string;
  status: string;
  /** The row's alarm: anything but OK stands out. */
  tone: 'ok' | 'warn' | 'bad';
}

const TONES: Record<string, LagRow['tone']> = { OK: 'ok', WARN: 'warn', REWIND: 'warn', STALL: 'bad', STOP: 'bad' };

/** The lag table: a row per group, topic and partition, worst groups first. */
export function lagRows(report: Pick<LagReport, 'groups'>): LagRow[] {
  const severity = (s: string) => ['STOP', 'STALL', 'REWIND', 'WARN', 'OK'].indexOf(s);
  return [...report.groups]
    .sort((a, b) => severity(a.status) - severity(b.status) || a.group.localeCompare(b.group))
    .flatMap((g) =>
      g.partitions.map((p) => ({
        group: g.group,
        topic: p.topic,
        partition: p.partition,
        lagMessages: p.lagMessages,
        lagSeconds: formatSeconds(p.lagSeconds),
        status: p.status,
        tone: TONES[p.status] ?? 'warn',
      })),
    );
}

export interface PermitRow {
  scope: string;
  inUse: number;
  limit: number;
  /** Share of the limit in use, 0..1 (1 when the limit is 0). */
  usage: number;
  /** What a change of this row's limit sends (the scopes the admin limits API accepts); undefined for derived ones (class:batch). */
  edit?: { scope: LimitView['scope']; name?: string };
  /** The configured limit when a run-time override replaces it. */
  configured?: number;
  /** The oldest waiter column: how long the longest-waiting run has waited, or why it is not known. */
  oldestWaiter: string;
}

/** A scope's oldest waiter as the page says it; while the waiters cannot be read, unknown (the page says why). */
export function oldestWaiterText(seconds: number | undefined, known: boolean): string {
  if (!known) return 'unknown';
  return seconds === undefined ? 'none waiting' : formatSeconds(seconds);
}

const PAUSE_REASONS: Record<string, string> = {
  buffer_full: 'the read-ahead buffer is full: the processor has more of these partitions\' runs than it can start',
  breaker_open: 'every run buffered from these partitions waits for an open dependency',
};

/** Why partitions are paused, in words (an unknown reason as it is). */
export function pausedWhy(reason: string): string {
  return PAUSE_REASONS[reason] ?? reason;
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/** How many partitions are paused for one reason, and by how many processors: `3 partitions paused by 2 processors`. */
export function pausedCount(p: Pick<PausedPartitions, 'partitions' | 'processors'>): string {
  return `${plural(p.partitions, 'partition', 'partitions')} paused by ${plural(p.processors, 'processor', 'processors')}`;
}

/** Which partitions, by topic: `runs.batch 0, 1; runs.interactive 2`, and how many more the processors left unnamed. */
export function pausedPartitionList(p: Pick<PausedPartitions, 'topics' | 'unlisted'>): string {
  const named = p.topics.map((t) => `${t.topic} ${t.partitions.join(', ')}`).join('; ');
  if (p.unlisted <= 0) return named;
  const more = `${p.unlisted} more not named`;
  return named ? `${named}; ${more}` : more;
}

/** Held runs of one dependency by tenant, largest first: `tenant-a 3, tenant-b 1`. */
export function heldTenants(tenants: Readonly<Record<string, number>>): string {
  return Object.entries(tenants)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([t, n]) => `${t} ${n}`)
    .join(', ');
}

/** Permits in use against their limits, joined with the limits API's view to know which can be edited. */
export function permitRows(permits: readonly PermitUse[], limits: readonly LimitView[], waitersKnown: boolean): PermitRow[] {
  const byField = new Map(limits.map((l) => [l.name === undefined ? l.scope : `${l.scope}:${l.name}`, l]));
  return permits.map((p) => {
    const l = byField.get(p.scope);
    return {
      scope: p.scope,
      inUse: p.inUse,
      limit: p.limit,
      usage: p.limit > 0 ? Math.min(1, p.inUse / p.limit) : 1,
      oldestWaiter: oldestWaiterText(p.oldestWaitingSec, waitersKnown),
      ...(l ? { edit: { scope: l.scope, ...(l.name !== undefined ? { name: l.name } : {}) } } : {}),
      ...(l && l.override !== null ? { configured: l.default } : {}),
    };
  });
}

/** A limit typed into the page: a whole number from 0 to 1,000,000 (the admin API's bounds), or why not. */
export function parseLimit(text: string): { limit: number } | { error: string } {
  const t = text.trim();
  if (!/^\d+$/.test(t)) return { error: 'a whole number, 0 or more' };
  const limit = Number(t);
  return limit > 1_000_000 ? { error: 'at most 1,000,000' } : { limit };
}

export interface TimelineItem {
  at: string;
  status: string;
  label: string;
  /** Time since the previous event ('' for the first). */
  after: string;
  tone: 'ok' | 'warn' | 'bad' | 'neutral';
}

const STATUS_TONES: Record<string, TimelineItem['tone']> = { completed: 'ok', failed: 'bad', dead_lettered: 'bad', expired: 'bad', cancelled: 'warn', waiting_dependency: 'warn' };

/** A run's events as a timeline: queued → running → steps → terminal, with the time each took. */
export function runTimeline(events: readonly RunEvent[]): TimelineItem[] {
  return events.map((e, i) => {
    const prev = events[i - 1];
    const after = prev ? formatSeconds((Date.parse(e.occurredAt) - Date.parse(prev.occurredAt)) / 1000) : '';
    const where = [e.step ? `step ${e.step}` : '', e.attempt > 1 ? `attempt ${e.attempt}` : ''].filter(Boolean).join(', ');
    const error = e.error ? ` (${e.error.code}: ${e.error.message})` : '';
    return { at: e.occurredAt, status: e.status, label: `${e.message}${where ? ` [${where}]` : ''}${error}`, after, tone: STATUS_TONES[e.status] ?? 'neutral' };
  });
}

/** A page's filter (Runs, DLQ) as the console API's query string; empty fields are left out. */
export function filterQuery(filter: Record<string, string>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) {
    const t = v.trim();
    if (!t) continue;
    params.set(k, k === 'since' || k === 'until' ? new Date(t).toISOString() : t);
  }
  return params.toString();
}
