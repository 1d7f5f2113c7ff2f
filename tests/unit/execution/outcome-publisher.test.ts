import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { RunRequested, RunStatusChanged } from '../../../src/events/schemas.js';
import { AttemptCalls } from '../../../src/execution/goodput.js';
import { OutcomePublisher, statusEvent } from '../../../src/execution/outcome-publisher.js';
import { MemoryRunCalls } from '../../../src/execution/run-progress.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RETRY_HEADER } from '../../../src/retries/retry-headers.js';
import { heldSequence, terminalSequence } from '../../../src/runs/status-sequence.js';
import { ATTEMPT } from '../processors/fixtures.js';
import { NOW, RUN } from './fixtures.js';

const run: RunRequested = { ...RUN, attempt: 2 };

describe('statusEvent', () => {
  it("carries the run's own fields, and null for what the report leaves out", () => {
    const { input: _input, idempotencyKey: _key, dueAt: _dueAt, ...own } = run;
    expect(statusEvent(run, { status: 'cancelled', sequence: 7, message: 'm' }, { occurredAt: NOW, attemptStartedAt: null })).toEqual({
      ...own,
      sequence: 7,
      status: 'cancelled',
      occurredAt: NOW,
      message: 'm',
      step: null,
      result: null,
      error: null,
      attemptStartedAt: null,
    });
  });

  it('carries the step, error and result the report gives', () => {
    const error = { code: 'dependency_error', message: 'HTTP 400', retryable: false };
    expect(statusEvent(run, { status: 'failed', sequence: 9, message: 'm', step: 'reply', error, result: '{}' }, { occurredAt: NOW, attemptStartedAt: NOW - 5 })).toMatchObject({ step: 'reply', error, result: '{}', attemptStartedAt: NOW - 5 });
  });
});

function publisher() {
  const log: string[] = [];
  const published: RunStatusChanged[] = [];
  const retries: Record<string, string>[] = [];
  const outcomes = new OutcomePublisher({
    config: loadConfig({ env: {} }),
    publishStatus: async (e) => {
      log.push(`status ${e.status}`);
      published.push(e);
    },
    enqueueRetry: async (_run, headers) => {
      log.push('retry topic');
      retries.push(headers);
    },
    deadLetters: { publishDeadLetter: async () => void log.push('dlq topic') },
    progress: new MemoryRunCalls(),
    calls: new AttemptCalls(),
    metrics: createMetrics(),
    logger: createLogger('silent'),
    now: () => NOW,
  });
  return { outcomes, log, published, retries };
}

describe('OutcomePublisher', () => {
  it('does not hold a run up for its progress events, but reports it finished only once they are acknowledged', async () => {
    const acks: (() => void)[] = [];
    const sent: string[] = [];
    const outcomes = new OutcomePublisher({
      config: loadConfig({ env: {} }),
      publishStatus: (e) => {
        sent.push(e.status);
        return new Promise<void>((resolve) => acks.push(resolve));
      },
      enqueueRetry: async () => undefined,
      deadLetters: { publishDeadLetter: async () => undefined },
      progress: new MemoryRunCalls(),
      calls: new AttemptCalls(),
      metrics: createMetrics(),
      logger: createLogger('silent'),
      now: () => NOW,
    });
    outcomes.running(run, { sequence: 2_001, message: 'running', step: 'understand' });
    outcomes.running(run, { sequence: 2_002, message: 'running', step: 'reply' });
    let finished = false;
    const done = outcomes.cancelled(run, 'requested', 'before step 3').then((s) => ((finished = true), s));
    // Handed to the producer in order, the outcome last, before any is acknowledged.
    expect(sent).toEqual(['running', 'running', 'cancelled']);
    acks[2]!();
    acks[1]!();
    await new Promise((r) => setTimeout(r, 10));
    expect(finished).toBe(false);
    acks[0]!();
    expect(await done).toBe('cancelled');
  });

  it('still finishes a run whose progress event could not be published', async () => {
    const warnings: string[] = [];
    const logger = createLogger('silent');
    logger.warn = ((_obj: unknown, msg: string) => void warnings.push(msg)) as typeof logger.warn;
    const outcomes = new OutcomePublisher({
      config: loadConfig({ env: {} }),
      publishStatus: async (e) => {
        if (e.status === 'running') throw new Error('Kafka did not acknowledge');
      },
      enqueueRetry: async () => undefined,
      deadLetters: { publishDeadLetter: async () => undefined },
      progress: new MemoryRunCalls(),
      calls: new AttemptCalls(),
      metrics: createMetrics(),
      logger,
      now: () => NOW,
    });
    outcomes.running(run, { sequence: 2_001, message: 'running', step: 'understand' });
    expect(await outcomes.cancelled(run, 'requested', 'before step 2')).toBe('cancelled');
    expect(warnings).toEqual(['could not publish a progress event']);
  });

  it('stamps the events of a started attempt with its start, and a hold before the start with none', async () => {
    const { outcomes, published } = publisher();
    await outcomes.held(run, 'anthropic', NOW + 5_000);
    outcomes.startAttempt(run, NOW - 20);
    outcomes.running(run, { sequence: 2_001, message: 'running', step: 'understand' });
    expect(published.map((e) => [e.sequence, e.attemptStartedAt])).toEqual([
      [heldSequence(2), null],
      [2_001, NOW - 20],
    ]);
    expect(published[0]!.message).toBe('waiting for anthropic (breaker open); next probe at 2026-01-01T12:00:05.000Z');
  });

  it('puts the next attempt on the retry topic before telling the run waits for it', async () => {
    const { outcomes, log, published, retries } = publisher();
    const retry = { reason: 'transient_failure', dependency: 'anthropic', message: 'HTTP 529', dueAt: NOW + 2_000, outputSeen: true } as const;
    expect(await outcomes.retried(run, { ...ATTEMPT, priorFailures: 1 }, { ...retry, failure: true })).toBe('retried');
    expect(log).toEqual(['retry topic', 'status waiting_dependency']);
    expect(published[0]).toMatchObject({ sequence: terminalSequence(2), message: 'anthropic failed (HTTP 529); attempt 3 at 2026-01-01T12:00:02.000Z' });
    expect(retries[0]).toMatchObject({ [RETRY_HEADER.failures]: '2', [RETRY_HEADER.outputSeen]: 'true' });
    await outcomes.retried(run, { ...ATTEMPT, priorFailures: 1 }, { ...retry, failure: false });
    expect(retries[1]![RETRY_HEADER.failures]).toBe('1');
  });

  it('archives a failed run in the DLQ topic before reporting it failed', async () => {
    const { outcomes, log, published } = publisher();
    const error = { code: 'dependency_error', message: 'HTTP 400', retryable: false };
    expect(await outcomes.failed(run, ATTEMPT, { reason: 'non_retryable', message: 'failed: step 1/3 (understand) — HTTP 400', step: 'understand', error })).toBe('failed');
    expect(log).toEqual(['dlq topic', 'status failed']);
    expect(published[0]).toMatchObject({ sequence: terminalSequence(2), step: 'understand', error, result: null });
  });

  it('reports a completion with its result, or a result too large for a status event as a failure', async () => {
    const { outcomes, published } = publisher();
    expect(await outcomes.completed(run, ATTEMPT, { message: 'completed', result: '{"text":"ok"}' })).toBe('completed');
    expect(published[0]).toMatchObject({ status: 'completed', result: '{"text":"ok"}', error: null });
    const huge = 'x'.repeat(loadConfig({ env: {} }).processor.maxResultBytes + 1);
    expect(await outcomes.completed(run, ATTEMPT, { message: 'completed', result: huge })).toBe('failed');
    expect(published[1]).toMatchObject({ status: 'failed', result: null, error: { code: 'result_too_large' } });
  });
});
