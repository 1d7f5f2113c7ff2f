import { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE, REQUEST_ID_RULE, TERMINAL_RUN_STATUSES, isRequestId, type RunError, type RunStatus } from '../client/types.js';
import { RUN_CLASSES, type RunClass, type RunStatusChanged, type RunSubmission } from '../events/schemas.js';

/**
 * `SluiceProducer`'s decisions as plain functions: a caller's request as the RunSubmission the
 * ingress reads, and the status events the ingress and the run publish as the request's outcomes.
 */

/** What a producer asks for; the tenant is the producer's own. */
export interface SubmitRequest {
  workflow: string;
  /** Any JSON value; sent as JSON text. */
  input: unknown;
  class?: RunClass;
  /** The run's time budget from when its record is written to the ingress topic; the class's default when absent. */
  deadlineMs?: number;
  /** Required: a resend with the same key is answered with the first outcome, never a second run. */
  idempotencyKey: string;
  /** Echoed on the outcome statuses; a UUID unless given. */
  requestId?: string;
}

export type SubmissionCheck = { ok: true; submission: RunSubmission } | { ok: false; field: string; message: string };

/**
 * The request as a RunSubmission, or the first field the ingress would refuse it for: refused here,
 * the producer learns at once, where the ingress could only dead-letter the record. Bounds that
 * depend on Sluice's config (known workflows, deadline limits, input size) are left to the ingress.
 */
export function toRunSubmission(tenantId: string, req: SubmitRequest, newRequestId: () => string): SubmissionCheck {
  const invalid = (field: string, message: string): SubmissionCheck => ({ ok: false, field, message });
  if (typeof req.workflow !== 'string' || req.workflow.length === 0) return invalid('workflow', 'must be a non-empty string');
  if (typeof req.idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(req.idempotencyKey)) return invalid('idempotencyKey', `must be ${IDEMPOTENCY_KEY_RULE}`);
  const requestId = req.requestId ?? newRequestId();
  if (!isRequestId(requestId)) return invalid('requestId', `must be ${REQUEST_ID_RULE}`);
  if (req.class !== undefined && !(RUN_CLASSES as readonly string[]).includes(req.class)) return invalid('class', `must be one of ${RUN_CLASSES.join(', ')}`);
  if (req.deadlineMs !== undefined && !(Number.isSafeInteger(req.deadlineMs) && req.deadlineMs > 0)) return invalid('deadlineMs', 'must be a positive integer of milliseconds');
  let input: string | undefined;
  try {
    input = JSON.stringify(req.input);
  } catch (err) {
    return invalid('input', `cannot be written as JSON: ${(err as Error).message}`);
  }
  if (input === undefined) return invalid('input', 'must be a JSON value');
  return { ok: true, submission: { requestId, idempotencyKey: req.idempotencyKey, tenantId, workflow: req.workflow, input, class: req.class ?? null, deadlineMs: req.deadlineMs ?? null } };
}

/**
 * How far to wait: `answer` is the ingress's first or latest answer (`deferred` included);
 * `admission` waits past deferrals, which the ingress re-offers itself, for `queued` or `rejected`;
 * `terminal` for the run's end (or `rejected`).
 */
export type OutcomeStage = 'answer' | 'admission' | 'terminal';

/** A request's outcome as a status event told it. */
export interface SubmissionOutcome {
  requestId: string;
  runId: string;
  status: RunStatus;
  /** The status event's sequence: later outcomes of one run have higher ones. */
  sequence: number;
  message: string;
  /** Deferred or rejected: the contract's reason code; a run that failed: its error's code. */
  code?: string;
  /** Deferred: seconds until the ingress offers the request again; rejected: the contract's retryAfterSec. */
  retryAfterSec?: number;
  error?: RunError;
  /** Completed: the run's result, parsed from its JSON text. */
  result?: unknown;
  occurredAt: number;
}

/** What is known of a request: the ingress's latest answer, and the latest status of its run. */
export interface RequestProgress {
  answer?: SubmissionOutcome;
  latest?: SubmissionOutcome;
}

/** The ingress's answers: what a RunStatusChanged carrying a request id says. */
const ANSWERS: ReadonlySet<RunStatus> = new Set(['queued', 'deferred', 'rejected']);

/**
 * The progress with a status event taken in. Events may come twice (a consumer re-reads after a
 * rebalance): one older than what is known changes nothing. An answer with a request id is the
 * request's answer (a duplicate's replays its first); every event is the run's latest.
 */
export function progressWith(p: RequestProgress, outcome: SubmissionOutcome, isAnswer: boolean): RequestProgress {
  const newer = (known: SubmissionOutcome | undefined) => known === undefined || outcome.sequence >= known.sequence;
  return {
    ...p,
    ...(isAnswer && ANSWERS.has(outcome.status) && newer(p.answer) ? { answer: outcome } : {}),
    ...(newer(p.latest) ? { latest: outcome } : {}),
  };
}

/** The outcome that ends a wait for `stage`, if the progress has one. */
export function outcomeAt(p: RequestProgress, stage: OutcomeStage): SubmissionOutcome | undefined {
  switch (stage) {
    case 'answer':
      return p.answer;
    case 'admission':
      return p.answer?.status === 'queued' || p.answer?.status === 'rejected' ? p.answer : undefined;
    case 'terminal':
      return p.latest && TERMINAL_RUN_STATUSES.has(p.latest.status) ? p.latest : undefined;
  }
}

/** A status event as the outcome of `requestId` (the event's own, or the producer's request whose run it is). */
export function outcomeOf(requestId: string, e: RunStatusChanged): SubmissionOutcome {
  let result: unknown;
  if (e.status === 'completed' && e.result !== null) {
    try {
      result = JSON.parse(e.result);
    } catch {
      result = e.result;
    }
  }
  return {
    requestId,
    runId: e.runId,
    status: e.status,
    sequence: e.sequence,
    message: e.message,
    ...(e.error ? { code: e.error.code, error: e.error } : {}),
    ...(e.retryAfterSec != null ? { retryAfterSec: e.retryAfterSec } : {}),
    ...(result !== undefined ? { result } : {}),
    occurredAt: e.occurredAt,
  };
}
