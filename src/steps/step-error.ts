import type { CallTimeouts } from '../config/schema.js';
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

/**
 * Whether a call's timeout fired on a budget the run's deadline cut short (`clampedTotalMs`, below
 * the dependency's own total, or a connect or read budget clamped to it), not on one of the
 * dependency's own budgets. Such a call was ended by us: it says nothing about the dependency.
 */
export function timedOutOnDeadline(kind: StepErrorKind, own: CallTimeouts, clampedTotalMs: number): boolean {
  if (clampedTotalMs >= own.totalMs) return false;
  switch (kind) {
    case 'total_timeout':
      return true;
    case 'connect_timeout':
      return clampedTotalMs < own.connectMs;
    case 'read_timeout':
      return clampedTotalMs < own.readMs;
    default:
      return false;
  }
}
