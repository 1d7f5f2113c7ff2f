import type { HeaderReader } from './rate-limit-headers.js';

/** Why a step's call did not produce a result; `retryable` feeds the retry policy. */
export type StepErrorKind = 'connect_timeout' | 'read_timeout' | 'total_timeout' | 'connection' | 'http_status' | 'bad_response' | 'deadline';

export class StepError extends Error {
  constructor(
    readonly kind: StepErrorKind,
    readonly dependency: string,
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    readonly retryAfterSec?: number,
    /** The failed response's headers, when there was a response: what it says of the provider's rate limits. */
    readonly responseHeaders?: HeaderReader,
  ) {
    super(message);
    this.name = 'StepError';
  }
}
