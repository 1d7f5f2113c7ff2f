import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import {
  UsageError,
  clip,
  emptyTally,
  exitFor,
  filterFrom,
  formatRow,
  formatStats,
  formatTable,
  listTable,
  nextAttempt,
  outcomeLine,
  pacer,
  parseId,
  parseLimit,
  parseRate,
  parseWhen,
  planReplay,
  ReplayRefusedError,
  replayResult,
  summaryLine,
  tallyOutcome,
  type ReplayPlan,
} from '../../../src/cli/dlq-command.js';
import type { DeadLetterRow, DeadLetterSummary } from '../../../src/dlq/dead-letter-store.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { topicNames } from '../../../src/kafka/topics.js';

const NOW = Date.UTC(2026, 2, 10, 12, 0, 0);
const EXIT = { ok: 0, failure: 1, usage: 2, partial: 3 };

describe('parseWhen', () => {
  it.each([
    ['30s', NOW - 30_000],
    ['90m', NOW - 90 * 60_000],
    ['2h', NOW - 2 * 3_600_000],
    ['7d', NOW - 7 * 86_400_000],
    ['1w', NOW - 7 * 86_400_000],
    ['2026-03-01', Date.UTC(2026, 2, 1)],
    ['2026-03-01T12:30Z', Date.UTC(2026, 2, 1, 12, 30)],
    ['2026-03-01T12:30:15.250Z', Date.UTC(2026, 2, 1, 12, 30, 15, 250)],
    ['2026-03-01 12:30', Date.UTC(2026, 2, 1, 12, 30)],
    ['2026-03-01T12:30+02:00', Date.UTC(2026, 2, 1, 10, 30)],
  ])('reads %s', (raw, expected) => {
    expect(parseWhen(raw, NOW).getTime()).toBe(expected);
  });

  it('reads a time without an offset as UTC, whatever the machine zone', () => {
    expect(parseWhen('2026-07-01T00:00', NOW).toISOString()).toBe('2026-07-01T00:00:00.000Z');
  });

  it.each(['yesterday', '2 hours', '2H', '-2h', '2026-02-30', '2026-13-01', '2026-03-01T25:00Z', '2026-3-1', '', '99999999999999999w'])('refuses %j', (raw) => {
    expect(() => parseWhen(raw, NOW)).toThrow(InvalidArgumentError);
  });
});

describe('parseId, parseLimit, parseRate', () => {
  it('takes positive integer ids up to bigint range', () => {
    expect(parseId('42')).toBe('42');
    expect(parseId('9223372036854775807')).toBe('9223372036854775807');
    for (const bad of ['0', '-1', '007', '1.5', 'abc', '12abc', '9223372036854775808', ''])
      expect(() => parseId(bad), bad).toThrow(/is not an id/);
  });

  it('takes limits from 1 to 10000', () => {
    expect(parseLimit('1')).toBe(1);
    expect(parseLimit('10000')).toBe(10_000);
    for (const bad of ['0', '10001', '-5', '2.5', 'ten']) expect(() => parseLimit(bad), bad).toThrow(InvalidArgumentError);
  });

  it('takes a rate as N or N/s', () => {
    expect(parseRate('10')).toBe(10);
    expect(parseRate('2.5/s')).toBe(2.5);
    for (const bad of ['0', '0/s', '-1', '5/m', 'fast', '1001']) expect(() => parseRate(bad), bad).toThrow(InvalidArgumentError);
  });
});

describe('filterFrom', () => {
  it('maps the options, `all` meaning any status', () => {
    const since = new Date(NOW - 3_600_000);
    expect(filterFrom({ tenant: 't', workflow: 'w', reason: 'decode_error', status: 'pending', since, limit: 5 })).toEqual({
      tenant: 't',
      workflow: 'w',
      reason: 'decode_error',
      status: 'pending',
      since,
      until: undefined,
      limit: 5,
    });
    expect(filterFrom({ status: 'all' }).status).toBeUndefined();
  });

  it('refuses a time window that ends before it starts, naming both options', () => {
    const call = () => filterFrom({ since: new Date(NOW), until: new Date(NOW - 1) });
    expect(call).toThrow(UsageError);
    expect(call).toThrow(/--since .* must be before --until/);
  });
});

describe('formatTable and the list table', () => {
  it('pads columns to their widest cell and leaves no trailing spaces', () => {
    expect(formatTable(['A', 'LONG HEADER', 'Z'], [['wide cell', 'x', ''], ['b', 'y', 'last']])).toBe(
      ['A          LONG HEADER  Z', 'wide cell  x', 'b          y            last', ''].join('\n'),
    );
  });

  it('clips to one line of the given width', () => {
    expect(clip('a\n  b', 10)).toBe('a b');
    expect(clip('x'.repeat(20), 10)).toBe(`${'x'.repeat(9)}…`);
  });

  it('shows a row per dead letter, missing values as "-"', () => {
    const row: DeadLetterSummary = {
      id: '7',
      failedAt: new Date(NOW),
      tenantId: null,
      workflow: null,
      runId: null,
      reason: 'decode_error',
      errorClass: 'EventDecodeError',
      errorMessage: `first byte is 222\n${'y'.repeat(100)}`,
      attempts: 1,
      status: 'pending',
      originalTopic: 'sluice.runs.interactive',
      replayCount: 0,
    };
    const [header, line] = listTable([row]).trimEnd().split('\n');
    expect(header).toMatch(/^ID\s+FAILED AT\s+TENANT\s+WORKFLOW\s+REASON\s+ERROR\s+ATTEMPTS\s+STATUS\s+RUN ID$/);
    expect(line!.split(/\s{2,}/)).toEqual(['7', '2026-03-10 12:00:00Z', '-', '-', 'decode_error', `EventDecodeError: first byte is 222 ${'y'.repeat(23)}…`, '1', 'pending', '-']);
  });
});

const run: RunRequested = {
  runId: '019b7a00-0000-7000-8000-000000000001',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'batch',
  admittedAt: NOW - 7_200_000,
  deadline: NOW - 7_200_000 + 600_000,
  attempt: 2,
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  input: '{}',
  idempotencyKey: 'k-1',
  dueAt: NOW - 7_000_000,
};

function deadRow(over: Partial<DeadLetterRow> = {}): DeadLetterRow {
  return {
    id: '12',
    failedAt: new Date(NOW),
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    runId: run.runId,
    reason: 'non_retryable',
    errorClass: 'ToolHttpError',
    errorMessage: 'answered 400',
    attempts: 2,
    status: 'pending',
    originalTopic: 'ns.sluice.runs.retry',
    replayCount: 0,
    originalPartition: 2,
    originalOffset: '99',
    originalKey: Buffer.from('tenant-a'),
    consumerGroup: 'ns.sluice.processor',
    payload: Buffer.from([0, 0, 0, 0, 1, 2]),
    payloadJson: run,
    headers: { 'sluice-dlt-reason': 'non_retryable' },
    errorStack: 'ToolHttpError: answered 400\n    at step (x.ts:1:1)',
    firstFailedAt: new Date(NOW - 60_000),
    archivedAt: new Date(NOW),
    replayedAt: null,
    replayedBy: null,
    discardedAt: null,
    discardedBy: null,
    discardReason: null,
    ...over,
  };
}

describe('replay construction', () => {
  const topics = topicNames('ns.');

  it('makes the next attempt: same run, attempt + 1, the same window from now, due at once', () => {
    expect(nextAttempt(run, NOW)).toEqual({ ...run, attempt: 3, admittedAt: NOW, deadline: NOW + 600_000, dueAt: null });
  });

  it('sends a run to its class topic keyed by tenant, marked with the row it came from', () => {
    const plan = planReplay(deadRow(), run, topics, NOW);
    expect(plan).toEqual({
      topic: 'ns.sluice.runs.batch',
      key: 'tenant-a',
      headers: { traceparent: run.traceparent, 'sluice-replay-of': '12' },
      body: { run: nextAttempt(run, NOW) },
    });
    expect(planReplay(deadRow(), { ...run, class: 'interactive' }, topics, NOW).topic).toBe('ns.sluice.runs.interactive');
  });

  it('sends poison back unchanged: original bytes, key and topic', () => {
    const row = deadRow({ payloadJson: null, originalTopic: 'ns.sluice.runs.interactive', originalKey: Buffer.from([0xff]) });
    const plan = planReplay(row, undefined, topics, NOW);
    expect(plan).toEqual({ topic: 'ns.sluice.runs.interactive', key: Buffer.from([0xff]), headers: { 'sluice-replay-of': '12' }, body: { raw: row.payload } });
  });

  it.each(['interactive', 'batch', 'retry', 'status', 'dlq'] as const)('sends poison back into this namespace’s %s topic', (kind) => {
    const row = deadRow({ payloadJson: null, originalTopic: topics[kind] });
    expect(planReplay(row, undefined, topics, NOW).topic).toBe(`ns.sluice.runs.${kind}`);
  });

  it.each([
    ['another namespace’s work topic', 'other.sluice.runs.interactive'],
    ['the same topic without the namespace', 'sluice.runs.interactive'],
    ['a topic outside Sluice', 'payments.ledger'],
    ['a name that only starts like ours', 'ns.sluice.runs.interactive.shadow'],
    ['an empty topic', ''],
  ])('refuses poison whose original topic is %s, naming it and the topics it may use', (_, originalTopic) => {
    const row = deadRow({ payloadJson: null, originalTopic });
    let caught: unknown;
    try {
      planReplay(row, undefined, topics, NOW);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ReplayRefusedError);
    expect((caught as Error).name).toBe('ReplayRefusedError');
    expect((caught as Error).message).toBe(
      `its original topic ${JSON.stringify(originalTopic)} is not one of this namespace's topics (ns.sluice.runs.interactive, ns.sluice.runs.batch, ns.sluice.runs.retry, ns.sluice.runs.status, ns.sluice.runs.dlq), the only ones a replay produces into`,
    );
  });

  it('sends a decodable run to its class topic of this namespace whatever topic it came from', () => {
    const plan = planReplay(deadRow({ originalTopic: 'payments.ledger' }), run, topics, NOW);
    expect(plan.topic).toBe('ns.sluice.runs.batch');
  });
});

describe('replay reporting', () => {
  const plan: ReplayPlan = planReplay(deadRow(), run, topicNames(''), NOW);

  it('describes each row, also for a dry run', () => {
    expect(outcomeLine({ id: '12', result: 'replayed', value: plan }, false)).toBe(
      `replayed #12: run ${run.runId} (tenant-a/support-reply) -> sluice.runs.batch as attempt 3, deadline 2026-03-10 12:10:00Z`,
    );
    expect(outcomeLine({ id: '12', result: 'replayed', value: plan }, true)).toMatch(/^would replay #12: /);
    expect(outcomeLine({ id: '3', result: 'skipped', why: 'locked' }, false)).toBe('skipped #3: being replayed by someone else');
    expect(outcomeLine({ id: '4', result: 'failed', error: new Error('boom') }, false)).toBe('failed #4: boom');
  });

  it('sums up, and the exit code says whether everything was done', () => {
    const tally = emptyTally();
    expect(summaryLine(tally, false)).toBe('replayed 0, skipped 0, failed 0');
    expect(exitFor(tally, EXIT)).toBe(0);
    tallyOutcome(tally, { id: '1', result: 'replayed', value: plan });
    tallyOutcome(tally, { id: '2', result: 'skipped', why: 'replayed' });
    tallyOutcome(tally, { id: '3', result: 'skipped', why: 'not_found' });
    expect(summaryLine(tally, false)).toBe('replayed 1, skipped 2 (1 not found, 1 already replayed), failed 0');
    expect(summaryLine(tally, true)).toBe('dry run, nothing changed: would replay 1, skip 2 (1 not found, 1 already replayed)');
    expect(exitFor(tally, EXIT)).toBe(3);
    tallyOutcome(tally, { id: '4', result: 'failed', error: new Error('x') });
    expect(exitFor(tally, EXIT)).toBe(1);
  });

  it('tells a refusal apart from a failure, and leaves other outcomes as they are', () => {
    const refusal = new ReplayRefusedError('its original topic "x" is not one of this namespace\'s topics');
    expect(replayResult({ id: '5', result: 'failed', error: refusal })).toEqual({ id: '5', result: 'refused', error: refusal });
    const boom = { id: '6', result: 'failed', error: new Error('Kafka: producing timed out') } as const;
    expect(replayResult(boom)).toBe(boom);
    const skipped = { id: '7', result: 'skipped', why: 'discarded' } as const;
    expect(replayResult(skipped)).toBe(skipped);
    const replayed = { id: '8', result: 'replayed', value: plan } as const;
    expect(replayResult(replayed)).toBe(replayed);
  });

  it('says what was refused, counts it, and exits 3 unless something failed', () => {
    const refused = { id: '5', result: 'refused', error: new ReplayRefusedError('its original topic "x" is foreign') } as const;
    expect(outcomeLine(refused, false)).toBe('refused #5: its original topic "x" is foreign');
    expect(outcomeLine(refused, true)).toBe('would refuse #5: its original topic "x" is foreign');
    const tally = emptyTally();
    tallyOutcome(tally, { id: '1', result: 'replayed', value: plan });
    tallyOutcome(tally, refused);
    expect(tally).toMatchObject({ replayed: 1, refused: 1, failed: 0 });
    expect(summaryLine(tally, false)).toBe('replayed 1, skipped 0, refused 1, failed 0');
    expect(summaryLine(tally, true)).toBe('dry run, nothing changed: would replay 1, skip 0, refuse 1');
    expect(exitFor(tally, EXIT)).toBe(3);
    tallyOutcome(tally, { id: '2', result: 'skipped', why: 'locked' });
    expect(summaryLine(tally, false)).toBe('replayed 1, skipped 1 (1 being replayed by someone else), refused 1, failed 0');
    expect(exitFor(tally, EXIT)).toBe(3);
    tallyOutcome(tally, { id: '3', result: 'failed', error: new Error('x') });
    expect(exitFor(tally, EXIT)).toBe(1);
  });

  it('paces calls at the rate, the first at once', async () => {
    let clock = 1_000;
    const slept: number[] = [];
    const pace = pacer(4, () => clock, async (ms) => {
      slept.push(ms);
      clock += ms;
    });
    await pace();
    await pace();
    clock += 100;
    await pace();
    clock += 1_000;
    await pace();
    expect(slept).toEqual([250, 150]);
  });
});

describe('show and stats output', () => {
  it('shows every field, the error once with its stack, headers and the decoded payload', () => {
    const text = formatRow(deadRow());
    expect(text).toMatch(/^original record: +ns\.sluice\.runs\.retry partition 2 offset 99$/m);
    expect(text).toMatch(/^original key: +tenant-a$/m);
    expect(text).toContain('error:\n  ToolHttpError: answered 400\n      at step (x.ts:1:1)\n');
    expect(text.match(/answered 400/g)).toHaveLength(1);
    expect(text).toContain('headers:\n  sluice-dlt-reason: non_retryable\n');
    expect(text).toContain(`  "runId": "${run.runId}",`);
  });

  it('shows undecodable bytes in hex', () => {
    const text = formatRow(deadRow({ payloadJson: null, errorStack: null, originalKey: Buffer.from([0xff, 0x00]) }));
    expect(text).toMatch(/^original key: +hex ff00$/m);
    expect(text).toContain('payload:\nnot decodable; first 6 bytes in hex:\n  000000000102');
    expect(text).toContain('error:\n  ToolHttpError: answered 400\n');
  });

  it('prints counts with their tables', () => {
    const text = formatStats({
      since: null,
      bucket: 'day',
      total: 3,
      byStatus: { pending: 2, replayed: 1, discarded: 0 },
      byTenantReason: [{ tenantId: null, reason: 'decode_error', total: 3, pending: 2 }],
      overTime: [{ bucket: new Date(Date.UTC(2026, 2, 10)), total: 3 }],
    });
    expect(text).toBe(
      [
        'dead letters of all time: 3 (pending 2, replayed 1, discarded 0)',
        '',
        'TENANT  REASON        TOTAL  PENDING',
        '-       decode_error  3      2',
        '',
        'DAY (UTC)             TOTAL',
        '2026-03-10 00:00:00Z  3',
        '',
      ].join('\n'),
    );
  });
});
