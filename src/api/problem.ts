import type { FastifyReply } from 'fastify';

/** Error codes of the HTTP contract (docs/contract.md), each with its status and whether a retry can help. */
export const PROBLEMS = {
  invalid_request: { status: 400, title: 'The request is invalid', retryable: false },
  unknown_workflow: { status: 400, title: 'No such workflow', retryable: false },
  invalid_idempotency_key: { status: 400, title: 'The Idempotency-Key header is invalid', retryable: false },
  unauthorized: { status: 401, title: 'Missing or unknown API key', retryable: false },
  forbidden: { status: 403, title: 'This key may not do that', retryable: false },
  not_found: { status: 404, title: 'Not found', retryable: false },
  method_not_allowed: { status: 405, title: 'Method not allowed', retryable: false },
  run_finished: { status: 409, title: 'The run has already finished', retryable: false },
  idempotency_key_reused: { status: 409, title: 'This Idempotency-Key was used for a different request', retryable: false },
  idempotency_key_in_use: { status: 409, title: 'A request with this Idempotency-Key is still being processed', retryable: true },
  request_timeout: { status: 408, title: 'The request was not received in time', retryable: true },
  payload_too_large: { status: 413, title: 'The request body is too large', retryable: false },
  unsupported_media_type: { status: 415, title: 'Send application/json', retryable: false },
  headers_too_large: { status: 431, title: 'The request headers are too large', retryable: false },
  rate_limited: { status: 429, title: 'Rate limit exceeded', retryable: true },
  token_budget_exhausted: { status: 429, title: 'Token budget exhausted', retryable: true },
  tenant_backlog_full: { status: 429, title: 'Too much unfinished work for this tenant', retryable: true },
  overloaded: { status: 503, title: 'Sluice cannot take this work now', retryable: true },
  dependency_unavailable: { status: 503, title: 'A dependency this workflow needs is unavailable', retryable: true },
  deadline_unreachable: { status: 503, title: 'The run cannot finish before its deadline', retryable: true },
  not_ready: { status: 503, title: 'Not ready', retryable: true },
  internal: { status: 500, title: 'Internal error', retryable: true },
} as const;

export type ProblemCode = keyof typeof PROBLEMS;

export interface FieldError {
  path: string;
  message: string;
}

export interface ProblemExtras {
  detail?: string;
  retryAfterSec?: number;
  errors?: FieldError[];
}

/** RFC 9457 problem details with the contract's extension members. */
export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  code: ProblemCode;
  requestId: string;
  retryable: boolean;
  retryAfterSec?: number;
  errors?: FieldError[];
}

export function problemBody(code: ProblemCode, requestId: string, instance: string | undefined, extras: ProblemExtras = {}): ProblemBody {
  const p = PROBLEMS[code];
  return {
    type: `urn:sluice:problem:${code}`,
    title: p.title,
    status: p.status,
    ...(extras.detail ? { detail: extras.detail } : {}),
    ...(instance ? { instance } : {}),
    code,
    requestId,
    retryable: p.retryable,
    ...(extras.retryAfterSec !== undefined ? { retryAfterSec: Math.max(0, Math.ceil(extras.retryAfterSec)) } : {}),
    ...(extras.errors ? { errors: extras.errors } : {}),
  };
}

export function sendProblem(reply: FastifyReply, code: ProblemCode, extras: ProblemExtras = {}): FastifyReply {
  const body = problemBody(code, String(reply.request.id), reply.request.url, extras);
  if (body.retryAfterSec !== undefined) void reply.header('Retry-After', String(body.retryAfterSec));
  return reply.code(body.status).type('application/problem+json').send(body);
}
