/**
 * The HTTP contract's shapes (docs/contract.md, "HTTP") as a caller sees them. Declared here, below
 * the server, so that the client's declarations name nothing of the server; the server's views are
 * these types, and a test checks that what they are built from (statuses, errors, usage) still fits.
 */

export type RunClass = 'interactive' | 'batch';

/** `deferred` and `rejected` only for runs submitted through the Kafka ingress (an HTTP refusal is an answer, not a run). */
export type RunStatus = 'queued' | 'running' | 'waiting_dependency' | 'completed' | 'failed' | 'expired' | 'cancelled' | 'dead_lettered' | 'deferred' | 'rejected';

/** Statuses a run never leaves; its event stream ends after one of them. */
export const TERMINAL_RUN_STATUSES: ReadonlySet<RunStatus> = new Set(['completed', 'failed', 'expired', 'cancelled', 'dead_lettered', 'rejected']);

/**
 * An idempotency key (the `Idempotency-Key` header, a RunSubmission's `idempotencyKey`): printable
 * ASCII without spaces, as the IETF Idempotency-Key draft and Stripe accept. Here, below the
 * server, so the producer library checks a key by the rule admission applies.
 */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** IDEMPOTENCY_KEY in words, for the messages that refuse a key. */
export const IDEMPOTENCY_KEY_RULE = '1 to 255 printable ASCII characters without spaces';

/** A producer's request id, its correlation handle echoed on the ingress's statuses: bounded like a key. */
export const MAX_REQUEST_ID = 255;

/** The request id rule in words, for the messages that refuse one. */
export const REQUEST_ID_RULE = `1 to ${MAX_REQUEST_ID} characters`;

export function isRequestId(id: unknown): id is string {
  return typeof id === 'string' && id.length > 0 && id.length <= MAX_REQUEST_ID;
}

export interface RunError {
  code: string;
  message: string;
  retryable: boolean;
}

export interface PricedUsage {
  inputTokens: number;
  outputTokens: number;
  cacheCreationInputTokens: number;
  cacheReadInputTokens: number;
  llmCalls: number;
  /** Null when a call's model has no price. */
  costUsd: number | null;
}

/** A completed run's LLM tokens and cost, in total and by model. */
export interface RunUsage extends PricedUsage {
  byModel: Record<string, PricedUsage>;
}

export interface RunLinks {
  self: string;
  events: string;
}

/** `GET /v1/runs/:id`. */
export interface Run {
  runId: string;
  workflow: string;
  class: RunClass;
  status: RunStatus;
  statusMessage: string;
  admittedAt: string;
  deadline: string;
  startedAt?: string;
  finishedAt?: string;
  attempts: number;
  result?: unknown;
  error?: RunError;
  /** A completed run's LLM tokens and cost, once Sluice has stored them. */
  usage?: RunUsage;
  links: RunLinks;
}

/** One status transition from `GET /v1/runs/:id/events`; `sequence` is the SSE event id. */
export interface RunEvent {
  runId: string;
  sequence: number;
  status: RunStatus;
  message: string;
  step: string | null;
  attempt: number;
  occurredAt: string;
  result?: unknown;
  error?: RunError;
}

/** The 202 of `POST /v1/runs`, with what the client learned around it. */
export interface SubmittedRun {
  runId: string;
  status: 'queued';
  admission: 'admitted' | 'queued';
  /** True when admission put the run in line for capacity (`admission: "queued"`). */
  queued: boolean;
  queuePosition?: number;
  deadline: string;
  links: RunLinks;
  /** The key this submission was sent with: resubmitting under it never starts a second run. */
  idempotencyKey: string;
  /** True when Sluice answered from an earlier request with the same key (`Idempotent-Replayed`). */
  idempotentReplayed: boolean;
}

/** `DELETE /v1/runs/:id`: the request is recorded; the event stream shows what became of it. */
export interface CancelRequested {
  runId: string;
  status: RunStatus;
  cancelRequested: true;
}

export interface FieldError {
  path: string;
  message: string;
}
