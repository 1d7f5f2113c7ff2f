import type { DeadLetterRow } from '../../../src/dlq/dead-letter-store.js';
import type { RunRequested } from '../../../src/events/schemas.js';

export const NOW = Date.UTC(2026, 2, 10, 12, 0, 0);

/** A run archived two hours ago, on its second attempt, with a ten-minute window. */
export const run: RunRequested = {
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

export function deadRow(over: Partial<DeadLetterRow> = {}): DeadLetterRow {
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
