import type { IHeaders } from 'kafkajs';
import { RUN_CLASSES, type RunClass, type RunRequested } from '../events/schemas.js';
import { headerText } from '../kafka/headers.js';

/**
 * Headers of a record on the retry topic. Due time and class are duplicated out of the Avro body
 * so the retry forwarder can schedule and route without a schema registry round trip; the failure
 * context mirrors the DLQ's `sluice-dlt-*` headers so a run that later dies carries its history.
 */
export const RETRY_HEADER = {
  dueAt: 'sluice-retry-due-at',
  class: 'sluice-retry-class',
  failures: 'sluice-retry-failures',
  errorClass: 'sluice-retry-exception-fqcn',
  errorMessage: 'sluice-retry-exception-message',
  firstFailureAt: 'sluice-retry-first-failure-at',
  lastFailureAt: 'sluice-retry-last-failure-at',
  /** `true` once a step of the run was answered by its dependency: its first output is measured. */
  outputSeen: 'sluice-retry-output-seen',
  /**
   * `ingress` on a deferred ingress request: the record is the producer's RunSubmission, as it
   * came (signature included), and goes back to the ingress topic when due instead of to a work
   * topic. Absent on a run's retry.
   */
  destination: 'sluice-retry-destination',
} as const;

/** The value of `sluice-retry-destination` that sends a due record back to the ingress topic. */
export const INGRESS_DESTINATION = 'ingress';

const MAX_MESSAGE = 1_000;

export interface RetryRecordOptions {
  /** Epoch ms at which the next attempt may start. */
  dueAt: number;
  /** Run-level transient failures so far, this one included. */
  failures: number;
  error: { kind: string; message: string };
  /** Epoch ms of the run's first transient failure. */
  firstFailureAt: number;
  now: number;
  /** Whether a step of the run was answered by its dependency in this attempt or an earlier one. */
  outputSeen: boolean;
}

/** The next attempt of a run that failed transiently, and the headers its retry-topic record carries. */
export function retryRecord(run: RunRequested, opts: RetryRecordOptions): { event: RunRequested; headers: Record<string, string> } {
  const event: RunRequested = { ...run, attempt: run.attempt + 1, dueAt: opts.dueAt, tokenReservation: null, prepaidTurns: null };
  const headers: Record<string, string> = {
    // The forwarder keeps headers as they are, so the work-topic copy is traced like a first submission.
    traceparent: run.traceparent,
    [RETRY_HEADER.dueAt]: String(opts.dueAt),
    [RETRY_HEADER.class]: run.class,
    [RETRY_HEADER.failures]: String(opts.failures),
    [RETRY_HEADER.errorClass]: opts.error.kind,
    [RETRY_HEADER.errorMessage]: opts.error.message.slice(0, MAX_MESSAGE),
    [RETRY_HEADER.firstFailureAt]: new Date(opts.firstFailureAt).toISOString(),
    [RETRY_HEADER.lastFailureAt]: new Date(opts.now).toISOString(),
    [RETRY_HEADER.outputSeen]: String(opts.outputSeen),
  };
  return { event, headers };
}


const DECIMAL = /^\d{1,15}$/;

/** Run-level transient failures recorded on a retry; 0 when absent or unreadable (a first failure). */
export function parseRetryFailures(headers: IHeaders | undefined): number {
  const text = headerText(headers, RETRY_HEADER.failures);
  return text !== undefined && DECIMAL.test(text) ? Number(text) : 0;
}

/** When the run first failed transiently, from the header; undefined on a first attempt or garbage. */
export function parseRetryFirstFailureAt(headers: IHeaders | undefined): number | undefined {
  const at = Date.parse(headerText(headers, RETRY_HEADER.firstFailureAt) ?? '');
  return Number.isFinite(at) ? at : undefined;
}

/** Whether an earlier attempt had its first output, from the header; false when absent or anything but `true`. */
export function parseRetryOutputSeen(headers: IHeaders | undefined): boolean {
  return headerText(headers, RETRY_HEADER.outputSeen) === 'true';
}

/** The due time from the header, or undefined when it must be read from the event instead. */
export function parseRetryDueAt(headers: IHeaders | undefined): number | undefined {
  const text = headerText(headers, RETRY_HEADER.dueAt);
  return text !== undefined && DECIMAL.test(text) ? Number(text) : undefined;
}

/** Whether the record is a deferred ingress request, going back to the ingress topic when due. */
export function isIngressRetry(headers: IHeaders | undefined): boolean {
  return headerText(headers, RETRY_HEADER.destination) === INGRESS_DESTINATION;
}

/** The run class from the header, or undefined when it must be read from the event instead. */
export function parseRetryClass(headers: IHeaders | undefined): RunClass | undefined {
  const text = headerText(headers, RETRY_HEADER.class);
  return RUN_CLASSES.find((c) => c === text);
}
