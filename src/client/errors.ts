import { isRecord } from '../util/is-record.js';
import type { FieldError } from './types.js';

/** An answer that was not a success, and not a problem document Sluice wrote (a proxy's page, say). */
export class SluiceHttpError extends Error {
  override readonly name: string = 'SluiceHttpError';

  constructor(
    message: string,
    readonly status: number,
    /** The start of the response body, for diagnosis. */
    readonly body: string,
  ) {
    super(message);
  }
}

/** Sluice's own refusal: an `application/problem+json` answer with the contract's members. */
export class SluiceRefusal extends SluiceHttpError {
  override readonly name = 'SluiceRefusal';
  readonly code: string;
  readonly title: string;
  readonly detail: string | undefined;
  readonly requestId: string | undefined;
  readonly retryable: boolean;
  /** The longer of the `Retry-After` header and the body's `retryAfterSec`; undefined when neither says. */
  readonly retryAfterSec: number | undefined;
  readonly errors: readonly FieldError[];

  constructor(status: number, problem: Record<string, unknown>, retryAfterSec: number | undefined, body: string) {
    const code = typeof problem.code === 'string' ? problem.code : `http_${status}`;
    const title = typeof problem.title === 'string' ? problem.title : `HTTP ${status}`;
    const detail = typeof problem.detail === 'string' ? problem.detail : undefined;
    super(`${status} ${code}: ${detail ?? title}`, status, body);
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.requestId = typeof problem.requestId === 'string' ? problem.requestId : undefined;
    this.retryable = problem.retryable === true;
    this.retryAfterSec = retryAfterSec;
    this.errors = Array.isArray(problem.errors) ? problem.errors.filter(isFieldError) : [];
  }
}

/** An SSE event longer than the client accepts: a reconnect would only meet it again. */
export class SseEventTooLargeError extends Error {
  override readonly name = 'SseEventTooLargeError';

  constructor(readonly limitBytes: number) {
    super(`an event of the stream is longer than ${limitBytes} bytes`);
  }
}

/**
 * A success answer whose body is longer than the client reads (`maxResponseBytes`): only its start
 * was read, so there is nothing to return; the rest of the body was not fetched.
 */
export class ResponseTooLargeError extends Error {
  override readonly name = 'ResponseTooLargeError';

  constructor(
    readonly status: number,
    readonly limitBytes: number,
  ) {
    super(`the body of the ${status} answer is longer than ${limitBytes} bytes (maxResponseBytes)`);
  }
}

const isFieldError = (v: unknown): v is FieldError => isRecord(v) && typeof v.path === 'string' && typeof v.message === 'string';

/** What is kept of an error body: enough to read the problem, not a whole error page. */
const ERROR_BODY_CHARS = 16_384;

/**
 * Seconds from a `Retry-After` value: delay-seconds, or an HTTP date (seconds from `nowMs`, at
 * least 0); undefined when it is neither.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  // Date.parse reads some bare numbers ("1.5") as dates; an HTTP date names its day and month.
  const at = /[a-z]/i.test(text) ? Date.parse(text) : Number.NaN;
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMs) / 1000));
}

/** The server's wait: the longer of the header and the body's `retryAfterSec`, so a retry never comes early. */
function retryAfterOf(header: number | undefined, problem: Record<string, unknown>): number | undefined {
  const inBody = typeof problem.retryAfterSec === 'number' && Number.isFinite(problem.retryAfterSec) && problem.retryAfterSec >= 0 ? problem.retryAfterSec : undefined;
  if (header === undefined) return inBody;
  return inBody === undefined ? header : Math.max(header, inBody);
}

function problemOf(contentType: string | null, body: string): Record<string, unknown> | undefined {
  if (!contentType?.toLowerCase().startsWith('application/problem+json')) return undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    return isRecord(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** The error an unsuccessful answer stands for, given its status, headers and body text. */
export function failureOf(status: number, headers: Headers, body: string, nowMs: number): SluiceHttpError {
  const kept = body.slice(0, ERROR_BODY_CHARS);
  const problem = problemOf(headers.get('content-type'), body);
  if (!problem) return new SluiceHttpError(`HTTP ${status}${kept ? `: ${kept.slice(0, 200)}` : ''}`, status, kept);
  return new SluiceRefusal(status, problem, retryAfterOf(parseRetryAfter(headers.get('retry-after'), nowMs), problem), kept);
}
