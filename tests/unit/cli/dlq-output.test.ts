import { describe, expect, it } from 'vitest';
import { exitFor } from '../../../src/cli/dlq-command.js';
import { clip, formatRow, formatStats, formatTable, listTable } from '../../../src/cli/dlq-output.js';
import { outcomeLine, summaryLine } from '../../../src/dlq/replay-text.js';
import type { DeadLetterSummary } from '../../../src/dlq/dead-letter-store.js';
import { emptyTally, tallyOutcome } from '../../../src/dlq/replay-outcome.js';
import { planReplay, ReplayRefusedError, type ReplayPlan } from '../../../src/dlq/replay-plan.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { deadRow, NOW, run } from '../dlq/dead-letter-fixtures.js';

const EXIT = { ok: 0, failure: 1, usage: 2, partial: 3 };

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

describe('replay reporting', () => {
  const plan: ReplayPlan = planReplay(deadRow({ originalTopic: 'sluice.runs.retry' }), run, topicNames(''), NOW);

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
    expect(text).toContain('payload:\nnot a run Sluice wrote (poison, or a record the ingress refused); first 6 bytes in hex:\n  000000000102');
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
