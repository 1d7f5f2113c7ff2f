import { describe, expect, it } from 'vitest';
import type { FinishedPoint, FinishedSeries, OverviewPoint } from '../../../src/api/console/overview.js';
import { alertBanner, chartData, finishedNotice, finishedPick, formatSeconds, lagRows, latencyPick, latestFigures, heldTenants, oldestWaiterText, parseLimit, pausedCount, pausedPartitionList, pausedWhy, pendingLines, permitRows, filterQuery, runTimeline } from '../../../src/console/view-models.js';

const point = (at: number, admission: Record<string, number>): OverviewPoint => ({ at, admission, refusals: {} });
const finishedPoint = (at: number, completed: number, p50: Record<string, number | null> = {}, onTime = completed): FinishedPoint => ({ at, finished: { completed }, onTime, p50, p99: {} });
const series = (points: FinishedPoint[], o: Partial<FinishedSeries> = {}): FinishedSeries => ({ points, asOf: points.at(-1)?.at ?? null, unavailable: null, ...o });

describe('chartData', () => {
  it('aligns every series on the points, known labels first, gaps where a point lacks one', () => {
    const c = chartData([point(1_000, { admitted: 1 }), point(6_000, { rejected: 2, admitted: 3, zeta: 1 })], (p) => p.admission, ['admitted', 'queued', 'rejected']);
    expect(c.labels).toEqual(['admitted', 'rejected', 'zeta']);
    expect(c.data).toEqual([[1, 6], [1, 3], [null, 2], [null, 1]]);
  });
  it('names latency series by class and quantile', () => {
    expect(latencyPick(finishedPoint(0, 0, { interactive: 0.2 }))).toEqual({ 'interactive p50': 0.2 });
  });
});

describe('latestFigures', () => {
  it('averages the rates of the last minute, and shows dashes before the first point', () => {
    expect(latestFigures([], series([])).map((f) => f.value)).toEqual(['–', '–', '–', '–', '–', '–', '–']);
    expect(latestFigures([point(0, { admitted: 12.345 })], series([])).slice(0, 2)).toEqual([{ label: 'admitted', value: '12.3/s' }, { label: 'queued', value: '0/s' }]);
    // A burst of 6/s in one of the minute's points, then quiet: 1/s; the point a minute old is out.
    const minute = [point(0, { admitted: 100 }), point(10_000, { admitted: 6 }), ...[20, 30, 40, 50, 60].map((s) => point(s * 1000, { admitted: 0 }))];
    expect(latestFigures(minute, series([]))[0]).toEqual({ label: 'admitted', value: '1.00/s' });
  });
  it("takes completions from Postgres's points over their own last minute, and none while Postgres does not answer", () => {
    const admissions = [point(500_000, { admitted: 3 })];
    const finished = [finishedPoint(0, 50), ...[20, 30, 40, 50, 60, 70].map((s) => finishedPoint(s * 1000, s === 70 ? 12 : 0))];
    expect(latestFigures(admissions, series(finished)).slice(4, 5)).toEqual([{ label: 'completed', value: '2.00/s' }]);
    expect(latestFigures(admissions, series(finished, { unavailable: 'connect ECONNREFUSED' })).map((f) => f.value)).toEqual(['3.00/s', '0/s', '0/s', '0/s', 'unavailable', 'unavailable', 'unavailable']);
  });

  it('gives on-time goodput per second and as a share of the completions, over the last minute', () => {
    const finished = [20, 30, 40, 50, 60, 70].map((s) => finishedPoint(s * 1000, s === 70 ? 12 : 0, {}, s === 70 ? 9 : 0));
    expect(latestFigures([], series(finished)).slice(4)).toEqual([
      { label: 'completed', value: '2.00/s' },
      { label: 'on time', value: '1.50/s' },
      { label: 'completions on time', value: '75%' },
    ]);
    expect(latestFigures([], series([finishedPoint(0, 0)])).at(-1)).toEqual({ label: 'completions on time', value: '–' });
    expect(finishedPick(finishedPoint(0, 2, {}, 1))).toEqual({ completed: 2, 'on time': 1 });
  });
});

describe('finishedNotice', () => {
  it('says nothing while Postgres answers, and why not and as of when when it does not', () => {
    expect(finishedNotice(series([finishedPoint(0, 1)]))).toBeNull();
    expect(finishedNotice(series([], { asOf: Date.UTC(2026, 0, 1, 12, 30, 5), unavailable: 'statement timeout' }))).toBe(
      'Finished runs and end-to-end times are unavailable: Postgres did not answer (statement timeout); the charts show what it answered at 12:30:05 UTC.',
    );
    expect(finishedNotice(series([], { unavailable: 'statement timeout' }))).toMatch(/nothing to show yet\.$/);
  });
});

describe('alertBanner', () => {
  it('takes the worst severity and lists every alert', () => {
    expect(alertBanner([])).toBeUndefined();
    expect(alertBanner([{ alert: 'SluiceBatchLagHigh', severity: 'warning', summary: 'x' }, { alert: 'SluiceBreakerOpen', severity: 'critical', summary: 'y' }])).toEqual({ level: 'critical', lines: ['SluiceBatchLagHigh: x', 'SluiceBreakerOpen: y'] });
  });
});

describe('pendingLines', () => {
  it('says how long each pending condition has held, of its for: duration', () => {
    expect(pendingLines([{ alert: 'SluiceBreakerOpen', severity: 'critical', summary: 'Breaker of x is open', since: 10_000, forMs: 300_000 }], 75_000)).toEqual(['pending: SluiceBreakerOpen (Breaker of x is open), held 1 min 5 s of 5 min 0 s']);
  });
});

describe('lagRows', () => {
  it('flattens groups to partitions, worst groups first, with a tone per status', () => {
    const p = (status: 'OK' | 'STALL') => ({ topic: 't', partition: 0, committed: '1', low: '0', high: '2', lagMessages: '1', lagSeconds: 75, timeSource: 'record' as const, status });
    const rows = lagRows({ groups: [{ group: 'a', members: 1, status: 'OK', lagMessages: '1', maxLagSeconds: 1, partitions: [p('OK')] }, { group: 'b', members: 0, status: 'STALL', lagMessages: '1', maxLagSeconds: 75, partitions: [p('STALL')] }] });
    expect(rows.map((r) => [r.group, r.tone, r.lagSeconds])).toEqual([
      ['b', 'bad', '1 min 15 s'],
      ['a', 'ok', '1 min 15 s'],
    ]);
  });
});

describe('permitRows', () => {
  it('marks the scopes the limits API can change, and the configured value behind an override', () => {
    const rows = permitRows(
      [
        { scope: 'global', inUse: 5, limit: 10, oldestWaitingSec: 75 },
        { scope: 'class:batch', inUse: 1, limit: 5, oldestWaitingSec: 0.25 },
        { scope: 'tenant:a', inUse: 2, limit: 0 },
      ],
      [
        { scope: 'global', limit: 10, default: 20, override: 10 },
        { scope: 'tenant', name: 'a', limit: 0, default: 4, override: 0 },
      ],
      true,
    );
    expect(rows).toEqual([
      { scope: 'global', inUse: 5, limit: 10, usage: 0.5, edit: { scope: 'global' }, configured: 20, oldestWaiter: '1 min 15 s' },
      { scope: 'class:batch', inUse: 1, limit: 5, usage: 0.2, oldestWaiter: '250 ms' },
      { scope: 'tenant:a', inUse: 2, limit: 0, usage: 1, edit: { scope: 'tenant', name: 'a' }, configured: 4, oldestWaiter: 'none waiting' },
    ]);
  });
  it("says a scope's oldest waiter is unknown while the waiters cannot be read, whatever the scope had", () => {
    expect(permitRows([{ scope: 'global', inUse: 5, limit: 10 }], [], false)[0]!.oldestWaiter).toBe('unknown');
    expect(oldestWaiterText(12, false)).toBe('unknown');
    expect(oldestWaiterText(undefined, true)).toBe('none waiting');
    expect(oldestWaiterText(0, true)).toBe('0 ms');
  });
  it('says why partitions are paused, and whose runs are held', () => {
    expect(pausedWhy('breaker_open')).toContain('open dependency');
    expect(pausedWhy('something_new')).toBe('something_new');
    expect(heldTenants({ 'tenant-b': 1, 'tenant-a': 3, 'tenant-c': 1 })).toBe('tenant-a 3, tenant-b 1, tenant-c 1');
  });
  it('says how many partitions are paused by how many processors, and which', () => {
    expect(pausedCount({ partitions: 1, processors: 1 })).toBe('1 partition paused by 1 processor');
    expect(pausedCount({ partitions: 3, processors: 2 })).toBe('3 partitions paused by 2 processors');
    const topics = [{ topic: 'runs.batch', partitions: [0, 1] }, { topic: 'runs.interactive', partitions: [2] }];
    expect(pausedPartitionList({ topics, unlisted: 0 })).toBe('runs.batch 0, 1; runs.interactive 2');
    expect(pausedPartitionList({ topics, unlisted: 5 })).toBe('runs.batch 0, 1; runs.interactive 2; 5 more not named');
    expect(pausedPartitionList({ topics: [], unlisted: 5 })).toBe('5 more not named');
  });
  it('accepts only limits the admin API accepts', () => {
    expect(parseLimit(' 12 ')).toEqual({ limit: 12 });
    expect(parseLimit('1.5')).toHaveProperty('error');
    expect(parseLimit('-1')).toHaveProperty('error');
    expect(parseLimit('1000001')).toHaveProperty('error');
  });
});

describe('runTimeline', () => {
  it('shows each transition with its step, attempt, error and the time since the one before', () => {
    const base = { runId: 'r', result: undefined };
    const items = runTimeline([
      { ...base, sequence: 0, status: 'queued', message: 'queued', step: null, attempt: 0, occurredAt: '2026-01-01T00:00:00.000Z' },
      { ...base, sequence: 1, status: 'running', message: 'calling', step: 'draft', attempt: 2, occurredAt: '2026-01-01T00:00:00.250Z' },
      { ...base, sequence: 2, status: 'failed', message: 'failed', step: null, attempt: 2, occurredAt: '2026-01-01T00:00:03.250Z', error: { code: 'tool_error', message: 'boom', retryable: false } },
    ]);
    expect(items.map((i) => [i.status, i.label, i.after, i.tone])).toEqual([
      ['queued', 'queued', '', 'neutral'],
      ['running', 'calling [step draft, attempt 2]', '250 ms', 'neutral'],
      ['failed', 'failed [attempt 2] (tool_error: boom)', '3.0 s', 'bad'],
    ]);
  });
});

describe('filterQuery and formatSeconds', () => {
  it('leaves empty filters out and sends times as ISO', () => {
    expect(filterQuery({ runId: '', tenant: ' a ', since: '2026-01-01T00:00:00Z' })).toBe('tenant=a&since=2026-01-01T00%3A00%3A00.000Z');
  });
  it('reads as a person would', () => {
    expect([0.5, 4.25, 125, 7300].map(formatSeconds)).toEqual(['500 ms', '4.3 s', '2 min 5 s', '2 h 2 min']);
    // Rounding carries into the next unit instead of showing 60 of the smaller one.
    expect([899.6, 3599.7, 7199.9].map(formatSeconds)).toEqual(['15 min 0 s', '1 h 0 min', '2 h 0 min']);
  });
});
