import type { SluiceConfig } from '../config/schema.js';
import { buildDeadLetter, type DeadLetterReason, type DeadLetterSink } from '../dlq/dead-letter.js';
import type { RunError, RunRequested, RunStatus, RunStatusChanged } from '../events/schemas.js';
import { groupId } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { retryRecord } from '../retries/retry-headers.js';
import type { CancelReason } from '../runs/cancellation.js';
import { heldSequence, terminalSequence } from '../runs/status-sequence.js';
import { isTerminal } from '../status/run-history.js';
import type { AttemptContext, RunOutcome } from './attempt.js';
import { countEnd, endCounts, type AttemptCalls, type RunEnd } from './goodput.js';
import { checkResult } from './output-bounds.js';
import { InfrastructureError, infrastructureCall, type RunFailure } from './run-faults.js';
import type { RunProgress } from './run-progress.js';
import { secondsSinceAdmission } from './run-signals.js';

export interface OutcomePublisherDeps {
  config: Pick<SluiceConfig, 'namespace' | 'processor'>;
  publishStatus: (event: RunStatusChanged) => Promise<void>;
  /** Puts the next attempt of a run on the retry topic; resolves once Kafka acknowledged it. */
  enqueueRetry: (run: RunRequested, headers: Record<string, string>) => Promise<void>;
  deadLetters: DeadLetterSink;
  /** The run's record across attempts: each attempt's provider calls are added to it, and its end is recorded once. */
  progress: Pick<RunProgress, 'addCalls' | 'end'>;
  /** The provider calls of the attempts in progress, as the step caller counts them. */
  calls: AttemptCalls;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
}

/** What one status event says of a run, beyond the run's own fields; the rest are null unless given. */
export interface StatusReport {
  status: RunStatus;
  sequence: number;
  message: string;
  step?: string;
  error?: RunError;
  result?: string;
}

/** A run that fails: why it is dead-lettered, what its reader is told, and at which step if any. */
export interface RunFailed {
  reason: DeadLetterReason;
  message: string;
  step?: string;
  error: RunError;
  /** What the run produced before it failed (an agent's transcript so far), when that is worth keeping. */
  result?: string;
}

/** An attempt that ends with the run's next attempt on the retry topic, due at `dueAt`. */
export interface RunRetried {
  reason: 'breaker_open' | 'rate_limited' | 'transient_failure';
  dependency: string;
  message: string;
  dueAt: number;
  /** Whether it counts against the run's attempts: waiting out an open breaker or a rate limit does not. */
  failure: boolean;
  /** Travels with the next attempt, so it does not take its first answered step for the run's first output. */
  outputSeen: boolean;
}

const OUTCOME_PUBLISH_TRIES = 3;

/** The status event for `run`: its own fields, then what the report says. */
export function statusEvent(run: RunRequested, report: StatusReport, at: { occurredAt: number; attemptStartedAt: number | null }): RunStatusChanged {
  const { runId, tenantId, workflow, admittedAt, deadline, attempt, traceparent } = run;
  const { status, sequence, message } = report;
  return {
    runId,
    tenantId,
    workflow,
    class: run.class,
    admittedAt,
    deadline,
    attempt,
    traceparent,
    sequence,
    status,
    occurredAt: at.occurredAt,
    message,
    step: report.step ?? null,
    result: report.result ?? null,
    error: report.error ?? null,
    attemptStartedAt: at.attemptStartedAt,
  };
}

/**
 * Tells how an attempt goes and how it ends: running and held events, and the outcomes (completed,
 * failed, expired, cancelled, retried). Running and held events are not waited for: a run goes on
 * while Kafka acknowledges them. An outcome is acknowledged before its promise resolves, after what
 * must precede it: the run's earlier events, a failed run's dead letter, a retried run's next
 * attempt. The producer sends requests one at a time in call order, so a run's events keep their order.
 */
export class OutcomePublisher {
  /** When each attempt in progress started; keyed by the event object, so nothing outlives the attempt. */
  private readonly attemptStarts = new WeakMap<RunRequested, number>();
  /** Each attempt's running and held events not known to be settled: its outcome waits for them. */
  private readonly earlier = new WeakMap<RunRequested, Promise<unknown>>();

  constructor(private readonly deps: OutcomePublisherDeps) {}

  /** Stamps every later event of this attempt with its start. */
  startAttempt(run: RunRequested, at: number): void {
    this.attemptStarts.set(run, at);
  }

  /** Tells the run's reader it waits, before starting, for a dependency whose breaker is open; resolves once settled. */
  held(run: RunRequested, dependency: string, until: number): Promise<void> {
    const at = new Date(until).toISOString();
    const event = this.event(run, { status: 'waiting_dependency', sequence: heldSequence(run.attempt), message: `waiting for ${dependency} (breaker open); next probe at ${at}` });
    return this.informative(run, event, (err) => this.deps.logger.warn({ err, runId: run.runId }, 'could not publish a waiting event'));
  }

  /** Progress events are informative: a failure to publish one is logged and the run goes on, without waiting for it. */
  running(run: RunRequested, progress: { sequence: number; message: string; step: string }): void {
    void this.informative(run, this.event(run, { status: 'running', ...progress }), (err) => this.deps.logger.warn({ err, runId: run.runId, sequence: progress.sequence }, 'could not publish a progress event'));
  }

  /** Publishes an event whose failure only `onError` hears of, and holds the run's outcome until it settles. */
  private informative(run: RunRequested, event: RunStatusChanged, onError: (err: unknown) => void): Promise<void> {
    const published = this.deps.publishStatus(event).catch(onError);
    const before = this.earlier.get(run);
    this.earlier.set(run, before ? Promise.all([before, published]) : published);
    return published;
  }

  /**
   * Reports a run completed with its result, unless the result cannot travel in a status event:
   * then it fails clearly, since a status event over Kafka's message limit could never be produced.
   */
  completed(run: RunRequested, context: AttemptContext, done: { message: string; result: string; degraded?: boolean }): Promise<RunOutcome> {
    const bound = checkResult(done.result, this.deps.config.processor);
    if (!bound.ok) return this.failed(run, context, { reason: 'non_retryable', message: `failed: ${bound.message}`, error: { code: bound.code, message: bound.message, retryable: false } });
    return this.finish(run, { status: 'completed', message: done.message, result: done.result }, done.degraded === true ? 'degraded' : 'completed');
  }

  /** A failed run dies here: archived in the DLQ topic with its context, then reported failed. */
  failed(run: RunRequested, context: AttemptContext, failure: RunFailed): Promise<RunOutcome> {
    return this.fail(run, context, failure, 'failed');
  }

  /** Ends a run without further attempts: archived in the DLQ topic with its context, then reported failed. */
  deadLettered(run: RunRequested, context: AttemptContext, failure: RunFailure): Promise<RunOutcome> {
    return this.fail(run, context, { reason: failure.reason, message: `failed: ${failure.message}`, error: { code: failure.code, message: failure.message, retryable: failure.retryable } }, 'dead_lettered');
  }

  private async fail(run: RunRequested, context: AttemptContext, failure: RunFailed, end: 'failed' | 'dead_lettered'): Promise<RunOutcome> {
    await this.archive(run, context, failure.reason, failure.error);
    // What a failed run produced is kept only while it fits in its status event, as a result must.
    const result = failure.result !== undefined && checkResult(failure.result, this.deps.config.processor).ok ? failure.result : undefined;
    return this.finish(run, { status: 'failed', message: failure.message, step: failure.step, error: failure.error, result }, end);
  }

  /**
   * A batch run that expires is archived in the DLQ first (reason `expired`): its work is still
   * wanted, and a replay runs it with a fresh deadline window. An interactive one is only reported:
   * its caller has stopped waiting, so a late answer is useless and replaying it would be wrong.
   */
  async expired(run: RunRequested, context: AttemptContext, when: string): Promise<RunOutcome> {
    const error: RunError = { code: 'deadline_exceeded', message: `the deadline passed ${when}`, retryable: false };
    if (run.class === 'batch') await this.archive(run, context, 'expired', error);
    return this.finish(run, { status: 'expired', message: `expired: the deadline ${new Date(run.deadline).toISOString()} passed ${when}`, error }, 'expired');
  }

  cancelled(run: RunRequested, reason: CancelReason, when: string): Promise<RunOutcome> {
    const why = reason === 'requested' ? "at the caller's request" : 'because its submission was answered 503 (Kafka did not acknowledge it in time), and a refused submission never runs';
    return this.finish(run, { status: 'cancelled', message: `cancelled: stopped ${why} ${when}` }, 'cancelled');
  }

  /** Ends this attempt with the next one on the retry topic: nothing (no partition, no permit) is held while it waits. */
  async retried(run: RunRequested, context: AttemptContext, retry: RunRetried): Promise<RunOutcome> {
    const now = this.deps.now();
    const failures = context.priorFailures + (retry.failure ? 1 : 0);
    const next = retryRecord(run, { dueAt: retry.dueAt, failures, error: { kind: retry.reason, message: retry.message }, firstFailureAt: context.firstFailureAt ?? now, now, outputSeen: retry.outputSeen });
    // Before the next attempt exists: wherever it ends, this attempt's calls are in the run's record by then.
    await this.deps.progress.addCalls(run.runId, this.deps.calls.take(run), run.deadline);
    await infrastructureCall('retry_enqueue', undefined, () => this.deps.enqueueRetry(next.event, next.headers));
    this.deps.metrics.runRetries.inc({ reason: retry.reason });
    const why = {
      breaker_open: `waiting for ${retry.dependency} (breaker open)`,
      rate_limited: `waiting for rate limit on ${retry.dependency}`,
      transient_failure: `${retry.dependency} failed (${retry.message.slice(0, 200)})`,
    }[retry.reason];
    await this.finish(run, { status: 'waiting_dependency', message: `${why}; attempt ${next.event.attempt} at ${new Date(retry.dueAt).toISOString()}` }, undefined);
    return 'retried';
  }

  /** Produces the run's original record to the DLQ topic with the failure context; resolves once acknowledged. */
  private async archive(run: RunRequested, context: AttemptContext, reason: DeadLetterReason, error: RunError): Promise<void> {
    const now = this.deps.now();
    const failure = new Error(error.message);
    failure.name = error.code;
    const { envelope, headers } = buildDeadLetter({
      ...context.record,
      consumerGroup: groupId(this.deps.config.namespace, 'processor'),
      reason,
      error: failure,
      attempts: run.attempt,
      firstFailureAt: context.firstFailureAt ?? now,
      lastFailureAt: now,
      run,
    });
    await infrastructureCall('dead_letter', undefined, () => this.deps.deadLetters.publishDeadLetter(envelope, headers, this.deps.config.processor.produceTimeoutMs));
    this.deps.metrics.deadLettered.inc({ topic: context.record.topic, reason });
  }

  /**
   * The attempt's last event, tried a few times: the caller commits the record only once it and
   * every earlier event of the attempt are settled, so no event of a finished run is still in flight.
   * `end` is how the run ended, when this event ends it.
   */
  private async finish<S extends RunStatus>(run: RunRequested, report: Omit<StatusReport, 'sequence'> & { status: S }, end: RunEnd | undefined): Promise<S> {
    const event = this.event(run, { ...report, sequence: terminalSequence(run.attempt) });
    for (let attempt = 1; ; attempt++) {
      try {
        await Promise.all([this.deps.publishStatus(event), this.earlier.get(run)]);
        break;
      } catch (err) {
        if (attempt >= OUTCOME_PUBLISH_TRIES) throw new InfrastructureError('outcome_publish', undefined, err);
        this.deps.logger.warn({ err, runId: run.runId, attempt }, 'could not publish the run outcome; trying again');
        await new Promise((r) => setTimeout(r, 500 * attempt));
      }
    }
    if (isTerminal(report.status)) this.deps.metrics.runEndToEnd.observe({ class: run.class, status: report.status }, secondsSinceAdmission(run.admittedAt, event.occurredAt));
    // Once published, so what is counted is the end the run's reader was told.
    if (end) await this.countEnd(run, end, event.occurredAt);
    return report.status;
  }

  /** Counts the run's end in the goodput figures, unless an earlier delivery did (the record says so). */
  private async countEnd(run: RunRequested, end: RunEnd, at: number): Promise<void> {
    const calls = await this.deps.progress.end(run, this.deps.calls.take(run));
    if (calls) countEnd(this.deps.metrics, run, endCounts(end, at, run.deadline, calls));
  }

  private event(run: RunRequested, report: StatusReport): RunStatusChanged {
    return statusEvent(run, report, { occurredAt: this.deps.now(), attemptStartedAt: this.attemptStarts.get(run) ?? null });
  }
}
