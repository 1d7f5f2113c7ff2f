import type { StepError } from '../steps/step-error.js';
import type { BreakerOutcome } from './breaker-store.js';

/**
 * What a call's result says about the dependency's health. Only signs of the dependency struggling
 * count against it: a 4xx other than 408 or 429 is the dependency answering promptly that our
 * request was wrong, and a call we aborted ourselves says nothing either way, so it only gives
 * its probe slot back.
 */
export function breakerOutcomeOf(error: StepError | undefined): BreakerOutcome {
  if (error === undefined) return 'success';
  switch (error.kind) {
    case 'connect_timeout':
    case 'read_timeout':
    case 'total_timeout':
    case 'connection':
      return 'failure';
    case 'deadline':
      return 'released';
    case 'bad_response':
      return 'success';
    case 'http_status':
      return blamesOurRequest(error.status) ? 'success' : 'failure';
  }
}

/**
 * 408 and 429 are the dependency too slow or too busy. A status that is no 4xx at all (5xx, or
 * none we could read) cannot be put down to our request, so it counts against the dependency.
 */
function blamesOurRequest(status: number | undefined): boolean {
  return status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
}
