import { describe, expect, it } from 'vitest';
import type { RunStatus, RunStatusChanged } from '../../../src/events/schemas.js';
import { TERMINAL_STATUSES, foldStatusEvents, isTerminal, type RunRowPatch } from '../../../src/status/run-history.js';

const T0 = 1_767_225_600_000;
const RUN_A = '019b7a00-0000-7000-8000-00000000000a';
const RUN_B = '019b7a00-0000-7000-8000-00000000000b';

function ev(runId: string, sequence: number, status: RunStatus, occurredAt: number, extra: Partial<RunStatusChanged> = {}): RunStatusChanged {
  return {
    runId,
    tenantId: runId === RUN_B ? 'tenant-b' : 'tenant-a',
    workflow: 'support-reply',
    class: 'interactive',
    admittedAt: T0,
    deadline: T0 + 30_000,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    sequence,
    status,
    occurredAt,
    message: `${status} at ${sequence}`,
    step: null,
    result: null,
    error: null,
    attemptStartedAt: null,
    ...extra,
  };
}

const FAILURE = { code: 'dependency_unavailable', message: 'anthropic breaker open', retryable: true };

/** A complete, successful history of RUN_A. */
const happy = [
  ev(RUN_A, 0, 'queued', T0),
  ev(RUN_A, 1001, 'running', T0 + 100, { step: 'understand' }),
  ev(RUN_A, 1002, 'running', T0 + 200, { step: 'lookup-order', result: '{"step":1}' }),
  ev(RUN_A, 1999, 'completed', T0 + 300, { result: '{"reply":"on its way"}' }),
];

const only = (patches: RunRowPatch[]) => {
  expect(patches).toHaveLength(1);
  return patches[0]!;
};

describe('isTerminal', () => {
  it('knows the terminal statuses', () => {
    expect([...TERMINAL_STATUSES].sort()).toEqual(['cancelled', 'completed', 'dead_lettered', 'expired', 'failed', 'rejected']);
    for (const s of ['queued', 'running', 'waiting_dependency'] as const) expect(isTerminal(s)).toBe(false);
    for (const s of ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered', 'rejected'] as const) expect(isTerminal(s)).toBe(true);
  });
});

describe('foldStatusEvents', () => {
  it('returns nothing for an empty batch', () => {
    expect(foldStatusEvents([])).toEqual([]);
  });

  it('folds a whole history into one patch', () => {
    expect(only(foldStatusEvents(happy))).toEqual({
      runId: RUN_A,
      tenantId: 'tenant-a',
      workflow: 'support-reply',
      class: 'interactive',
      admittedAt: T0,
      deadline: T0 + 30_000,
      status: 'completed',
      statusMessage: 'completed at 1999',
      lastSequence: 1999,
      attempts: 1,
      startedAt: T0 + 100,
      finishedAt: T0 + 300,
      result: '{"reply":"on its way"}',
      error: null,
    });
  });

  it('ignores duplicates', () => {
    const dup = [...happy, ...happy, happy[1]!, happy[3]!];
    expect(foldStatusEvents(dup)).toEqual(foldStatusEvents(happy));
  });

  it('gives the same patch whatever the order of the batch', () => {
    const expected = foldStatusEvents(happy);
    const orders = [[3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]];
    for (const order of orders) {
      expect(foldStatusEvents(order.map((i) => happy[i]!))).toEqual(expected);
    }
  });

  it('does not reorder the array it is given', () => {
    const batch = [happy[3]!, happy[0]!];
    foldStatusEvents(batch);
    expect(batch.map((e) => e.sequence)).toEqual([1999, 0]);
  });

  it('returns one patch per run for a batch mixing several runs', () => {
    const batch = [
      ev(RUN_B, 1001, 'running', T0 + 50),
      ...happy,
      ev(RUN_B, 0, 'queued', T0 + 10),
      ev(RUN_B, 1002, 'waiting_dependency', T0 + 60, { message: 'waiting for capacity on anthropic' }),
    ];
    const patches = foldStatusEvents(batch);
    expect(patches.map((p) => p.runId).sort()).toEqual([RUN_A, RUN_B]);
    const a = patches.find((p) => p.runId === RUN_A)!;
    const b = patches.find((p) => p.runId === RUN_B)!;
    expect(a).toMatchObject({ status: 'completed', lastSequence: 1999, tenantId: 'tenant-a' });
    expect(b).toMatchObject({
      status: 'waiting_dependency',
      statusMessage: 'waiting for capacity on anthropic',
      lastSequence: 1002,
      tenantId: 'tenant-b',
      startedAt: T0 + 50,
      finishedAt: null,
      error: null,
    });
  });

  it('takes startedAt from the first running event, not a later one', () => {
    const batch = [
      ev(RUN_A, 1003, 'running', T0 + 900),
      ev(RUN_A, 1002, 'waiting_dependency', T0 + 500),
      ev(RUN_A, 1001, 'running', T0 + 100),
      ev(RUN_A, 2001, 'running', T0 + 5_000, { attempt: 2 }),
    ];
    expect(only(foldStatusEvents(batch))).toMatchObject({ startedAt: T0 + 100, status: 'running', attempts: 2, lastSequence: 2001 });
  });

  it('leaves startedAt null without a running event', () => {
    expect(only(foldStatusEvents([ev(RUN_A, 0, 'queued', T0)])).startedAt).toBeNull();
    expect(only(foldStatusEvents([ev(RUN_A, 0, 'queued', T0), ev(RUN_A, 1999, 'expired', T0 + 40_000)]))).toMatchObject({
      startedAt: null,
      finishedAt: T0 + 40_000,
      status: 'expired',
    });
  });

  it('sets finishedAt and error only when the newest event is terminal', () => {
    const running = only(foldStatusEvents([ev(RUN_A, 1001, 'running', T0 + 100)]));
    expect(running.finishedAt).toBeNull();
    expect(running.error).toBeNull();

    const failed = only(foldStatusEvents([ev(RUN_A, 1001, 'running', T0 + 100), ev(RUN_A, 1999, 'failed', T0 + 700, { error: FAILURE })]));
    expect(failed).toMatchObject({ status: 'failed', finishedAt: T0 + 700, error: FAILURE });
  });

  it('ignores an error carried by a non-terminal event', () => {
    const waiting = only(foldStatusEvents([ev(RUN_A, 1002, 'waiting_dependency', T0 + 100, { error: FAILURE })]));
    expect(waiting.error).toBeNull();
    expect(waiting.finishedAt).toBeNull();
  });

  it('clears finishedAt and error when a retry attempt follows a failed attempt', () => {
    const batch = [ev(RUN_A, 1999, 'failed', T0 + 700, { error: FAILURE }), ev(RUN_A, 2001, 'running', T0 + 2_000, { attempt: 2 })];
    expect(only(foldStatusEvents(batch))).toMatchObject({ status: 'running', finishedAt: null, error: null, attempts: 2 });
  });

  it('carries the latest non-null result forward', () => {
    const batch = [
      ev(RUN_A, 1001, 'running', T0 + 100, { result: '{"first":true}' }),
      ev(RUN_A, 1002, 'running', T0 + 200, { result: '{"second":true}' }),
      ev(RUN_A, 1003, 'waiting_dependency', T0 + 300),
      ev(RUN_A, 1999, 'dead_lettered', T0 + 400),
    ];
    expect(only(foldStatusEvents(batch))).toMatchObject({ result: '{"second":true}', status: 'dead_lettered', finishedAt: T0 + 400 });
  });

  it('has a null result when no event carries one', () => {
    expect(only(foldStatusEvents([ev(RUN_A, 0, 'queued', T0), ev(RUN_A, 1001, 'running', T0 + 1)])).result).toBeNull();
  });

  it('counts attempts as the highest attempt seen', () => {
    const batch = [ev(RUN_A, 3001, 'running', T0 + 10, { attempt: 3 }), ev(RUN_A, 1001, 'running', T0 + 1, { attempt: 1 })];
    expect(only(foldStatusEvents(batch)).attempts).toBe(3);
  });

  it('takes run metadata and the message from the newest event', () => {
    const batch = [
      ev(RUN_A, 0, 'queued', T0, { class: 'interactive', message: 'queued' }),
      ev(RUN_A, 1001, 'running', T0 + 5, { class: 'batch', deadline: T0 + 99, message: 'calling anthropic' }),
    ];
    expect(only(foldStatusEvents(batch))).toMatchObject({ class: 'batch', deadline: T0 + 99, statusMessage: 'calling anthropic' });
  });
});
