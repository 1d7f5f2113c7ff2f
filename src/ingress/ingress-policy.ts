import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import { ownEntry } from '../config/lookup.js';
import type { RunClass, RunStatusChanged, RunSubmission } from '../events/schemas.js';
import { IDEMPOTENCY_KEY, requestFingerprint } from '../admission/idempotency.js';
import { IDEMPOTENCY_KEY_RULE, REQUEST_ID_RULE, isRequestId } from '../client/types.js';
import { admissionMessage, refusalDetail } from '../admission/admit-run.js';
import type { AdmissionDecision, AdmissionReason } from '../admission/admission-policy.js';
import type { DeadLetterReason } from '../dlq/dead-letter.js';
import { statusRequestId } from '../events/ingress-request-id.js';
import { resolveDeadline } from '../runs/deadline.js';
import { serializeRunInput } from '../runs/run-input.js';
import { heldSequence } from '../runs/status-sequence.js';

/**
 * The ingress's decisions as plain functions: what a producer's RunSubmission asks for, when a
 * deferred one is offered to admission again, and the status events that tell the producer.
 */

/** Why an ingress record is dead-lettered instead of decided (`sluice-dlt-reason`). */
export type IngressRejection = 'invalid_request' | 'unknown_workflow';

/** A submission checked and ready for admission; nothing in it has touched shared state. */
export interface IngressRequest {
  tenantId: string;
  tenant: TenantConfig;
  requestId: string;
  idempotencyKey: string;
  workflowName: string;
  workflow: WorkflowConfig;
  runClass: RunClass;
  /** The run's time budget, from when its record was written (`recordWrittenAt`). */
  budgetMs: number;
  /** The input as canonical JSON text, within `api.input` bounds. */
  inputJson: string;
  /** Same workflow, input, class and deadlineMs: same fingerprint, so a resend is a duplicate. */
  fingerprint: string;
}

export type IngressCheck = { ok: true; request: IngressRequest } | { ok: false; reason: IngressRejection; message: string };

/**
 * The same checks as `POST /v1/runs` (workflow, class, deadline bounds, input depth and size) and
 * the record's own: its tenant must be the record key's, which the signature authenticated.
 */
export function checkSubmission(sub: RunSubmission, keyTenant: string, config: Pick<SluiceConfig, 'tenants' | 'workflows' | 'api'>): IngressCheck {
  const invalid = (message: string): IngressCheck => ({ ok: false, reason: 'invalid_request', message });
  if (sub.tenantId !== keyTenant) return invalid(`tenantId ${JSON.stringify(sub.tenantId)} is not the record key's tenant ${JSON.stringify(keyTenant)}`);
  const tenant = ownEntry(config.tenants, sub.tenantId);
  if (!tenant) return invalid(`unknown tenant ${JSON.stringify(sub.tenantId)}`);
  if (!isRequestId(sub.requestId)) return invalid(`requestId must be ${REQUEST_ID_RULE}`);
  if (!IDEMPOTENCY_KEY.test(sub.idempotencyKey)) return invalid(`idempotencyKey must be ${IDEMPOTENCY_KEY_RULE}`);
  const workflow = ownEntry(config.workflows, sub.workflow);
  if (!workflow) return { ok: false, reason: 'unknown_workflow', message: `unknown workflow ${JSON.stringify(sub.workflow)}` };
  const runClass = sub.class ?? workflow.defaultClass;
  // Any admittedAt will do: only the budget is kept, the deadline starts when the record was written.
  const deadline = resolveDeadline(sub.deadlineMs ?? undefined, runClass, config.api.deadlineMs, 0);
  if (!deadline.ok) return invalid(`deadlineMs ${deadline.message}`);
  let input: unknown;
  try {
    input = JSON.parse(sub.input);
  } catch (err) {
    return invalid(`input is not JSON text: ${(err as Error).message}`);
  }
  const serialized = serializeRunInput(input, config.api.input);
  if (!serialized.ok) return invalid(`input ${serialized.error.message}`);
  const body = { workflow: sub.workflow, input, ...(sub.class !== null ? { class: sub.class } : {}), ...(sub.deadlineMs !== null ? { deadlineMs: sub.deadlineMs } : {}) };
  return {
    ok: true,
    request: {
      tenantId: sub.tenantId,
      tenant,
      requestId: sub.requestId,
      idempotencyKey: sub.idempotencyKey,
      workflowName: sub.workflow,
      workflow,
      runClass,
      budgetMs: deadline.budgetMs,
      inputJson: serialized.json,
      fingerprint: requestFingerprint(sub.workflow, body, serialized.json),
    },
  };
}

/**
 * When a record's request arrived, which its deadline starts from: the record's timestamp, never
 * later than its reading. A topic Sluice creates stamps records with the broker's append time
 * (LogAppendTime), so a request that waited in the topic (an ingress outage, a lagging consumer)
 * has that much less of its budget left, as an HTTP request queued that long would have. On a
 * topic stamped with CreateTime the time is the producer's clock and is not signed: one in the
 * future counts as the reading, so no writer can lengthen a budget past what it asked for from
 * the reading; one in the past only shortens its own request's. Missing (-1 on old record
 * formats) or not a time: the reading.
 */
export function recordWrittenAt(timestamp: string | undefined, readAt: number): number {
  const at = Number(timestamp);
  return Number.isSafeInteger(at) && at > 0 ? Math.min(at, readAt) : readAt;
}

/**
 * Why a request is too old to be decided, or undefined when it is not: its record was written more
 * than `maxRecordAgeMs` before its first decision. For a first decision only: a re-offer's record
 * is the retry forwarder's, and its deferral keeps the original arrival and deadline.
 */
export function staleRecord(writtenAt: number, now: number, maxRecordAgeMs: number): string | undefined {
  const ageMs = now - writtenAt;
  if (ageMs <= maxRecordAgeMs) return undefined;
  return `its record was written at ${new Date(writtenAt).toISOString()}, ${ageMs} ms before the ingress could decide it, past ingress.maxRecordAgeMs (${maxRecordAgeMs} ms)`;
}

/**
 * Status sequences 0 … MAX_DECISIONS − 1 are the ingress's (one per decision: deferrals, then the
 * queued or rejected that ends them); the run's first attempt numbers its events from
 * `heldSequence(1)` on.
 */
export const MAX_DECISIONS = heldSequence(1);

export type Reoffer = { kind: 'reoffer'; dueAt: number } | { kind: 'too_late' };

/**
 * When a deferred request is offered to admission again: after its retry-after (the real time
 * until the answer could change), and at least 1/MAX_DECISIONS of its deadline window after this
 * decision, so it is decided at most MAX_DECISIONS times. Never at or past its deadline, and never
 * as its last allowed decision: then it is `too_late` (rejected, deadline_unreachable).
 */
export function reofferAt(opts: { now: number; retryAfterSec: number; admittedAt: number; deadline: number; decision: number }): Reoffer {
  const windowMs = opts.deadline - opts.admittedAt;
  const dueAt = opts.now + Math.max(opts.retryAfterSec * 1000, Math.ceil(windowMs / MAX_DECISIONS));
  if (dueAt >= opts.deadline || opts.decision + 1 >= MAX_DECISIONS) return { kind: 'too_late' };
  return { kind: 'reoffer', dueAt };
}

/** What the ingress answered a request, kept under its idempotency key and published as a status. */
export interface IngressAnswer {
  runId: string;
  /** The token of the key's claim, which every later decision of the request stores under. */
  token: string;
  /** Admission's answer; or `dead_lettered`: a deferral whose re-offer was dead-lettered (`endedDeferral`). */
  outcome: AdmissionDecision['outcome'] | 'dead_lettered';
  reason: AdmissionReason | DeadLetterReason;
  /** Why, where the reason's own words would not say it: a dead letter's error; a refusal of a record too old. */
  detail?: string;
  /** Which decision this is, from 0: the status event's sequence. */
  decision: number;
  admittedAt: number;
  deadline: number;
  runClass: RunClass;
  workflow: string;
  traceparent: string;
  decidedAt: number;
  retryAfterSec?: number;
  queuePosition?: number;
  /** Deferred: when the request is offered to admission again. */
  reofferAt?: number;
}

/** The HTTP status the same answer would have had, for the stored record. */
export function answerStatus(outcome: IngressAnswer['outcome']): number {
  switch (outcome) {
    case 'admitted':
    case 'queued':
      return 202;
    case 'deferred':
      return 429;
    case 'rejected':
      return 503;
    case 'dead_lettered':
      return 400;
  }
}

/**
 * The answer that ends a deferred request whose re-offer was dead-lettered (its checks failed
 * once config changed, its run too large for Kafka, …), so that whoever follows the run sees it
 * end instead of `deferred` for good. Only for a re-offer of the very deferral kept under its
 * key: the re-offer header is the producer's to write too. Undefined when there is none to end.
 */
export function endedDeferral(kept: IngressAnswer | undefined, reofferRunId: string | undefined, dead: { reason: DeadLetterReason; detail: string; at: number }): IngressAnswer | undefined {
  if (kept?.outcome !== 'deferred' || reofferRunId === undefined || kept.runId !== reofferRunId) return undefined;
  const { retryAfterSec: _retryAfter, reofferAt: _reoffer, queuePosition: _position, ...run } = kept;
  return { ...run, outcome: 'dead_lettered', reason: dead.reason, detail: dead.detail, decision: kept.decision + 1, decidedAt: dead.at };
}

function answerMessage(a: IngressAnswer): string {
  switch (a.outcome) {
    case 'admitted':
    case 'queued':
      return admissionMessage({ ...a, outcome: a.outcome });
    case 'deferred':
      return `deferred: ${a.reason}; offered to admission again at ${new Date(a.reofferAt ?? a.decidedAt).toISOString()}`;
    case 'rejected':
      return `rejected: ${a.reason}`;
    case 'dead_lettered':
      return `dead_lettered: its re-offer was archived in the DLQ (reason ${a.reason}); it never runs`;
  }
}

/** The status and error of an answer: refusals may be retried, a dead-lettered request as it was may not. */
function answerOutcome(a: IngressAnswer): Pick<RunStatusChanged, 'status' | 'error'> {
  switch (a.outcome) {
    case 'admitted':
    case 'queued':
      return { status: 'queued', error: null };
    case 'deferred':
    case 'rejected':
      return { status: a.outcome, error: { code: a.reason, message: a.detail ?? refusalDetail({ reason: a.reason as AdmissionReason }), retryable: true } };
    case 'dead_lettered':
      return { status: 'dead_lettered', error: { code: a.reason, message: a.detail ?? a.reason, retryable: false } };
  }
}

/**
 * The status event of an answer, for the producer's request: re-published as it was for a
 * duplicate. Its request id is bound to the tenant (`statusRequestId`), so one tenant reusing
 * another's request id answers only its own.
 */
export function answerStatusEvent(a: IngressAnswer, tenantId: string, requestId: string): RunStatusChanged {
  const { status, error } = answerOutcome(a);
  const refused = a.outcome === 'deferred' || a.outcome === 'rejected';
  return {
    runId: a.runId,
    tenantId,
    workflow: a.workflow,
    class: a.runClass,
    admittedAt: a.admittedAt,
    deadline: a.deadline,
    attempt: 0,
    traceparent: a.traceparent,
    sequence: a.decision,
    status,
    occurredAt: a.decidedAt,
    message: answerMessage(a),
    step: null,
    result: null,
    error,
    attemptStartedAt: null,
    requestId: statusRequestId(tenantId, requestId),
    retryAfterSec: refused ? (a.retryAfterSec ?? null) : null,
  };
}
