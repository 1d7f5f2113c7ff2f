import type { AdmissionOutcome } from '../admission/admission-policy.js';

/**
 * The `outcome` label of the HTTP metrics, a bounded set: what a submission was answered, so that
 * fast refusals do not flatter the latency of accepted runs. Everything that is not a submission
 * (reads, event streams, cancellation, health, metrics, admin, unknown routes) is `other`.
 */
export type HttpOutcome = AdmissionOutcome | 'error' | 'other';

/** What the submit route answered: an admission decision, or the stored answer of an Idempotency-Key. */
export type SubmitAnswer = AdmissionOutcome | 'replayed';

/**
 * A submission answered with an admission decision is labelled by it: admitted, queued (202),
 * deferred (429), rejected (503, Kafka not acknowledging included). One answered otherwise is
 * `error`: refused before any decision (invalid body, authentication, unknown workflow, an
 * Idempotency-Key conflict, a run too large for Kafka) or failed (500). A replayed answer is
 * `other`: it is read back, not decided, and would flatter the admitted latency.
 */
export function httpOutcome(submission: boolean, answered: SubmitAnswer | undefined): HttpOutcome {
  if (!submission || answered === 'replayed') return 'other';
  return answered ?? 'error';
}
