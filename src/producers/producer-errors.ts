import type { SubmissionOutcome } from './submission.js';

/** Every error `SluiceProducer` throws of its own; `instanceof` tells them apart. */
export class SluiceProducerError extends Error {
  override readonly name: string = 'SluiceProducerError';
}

/** The request breaks the RunSubmission contract before anything was sent; `field` names where. */
export class InvalidSubmissionError extends SluiceProducerError {
  override readonly name = 'InvalidSubmissionError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/**
 * Kafka did not acknowledge the record (acks=all) within the submit timeout, or it could not be
 * encoded against the registry. It may still land: submitting again with the same idempotency key
 * is safe, the ingress answers a duplicate with the first outcome.
 */
export class SubmitFailedError extends SluiceProducerError {
  override readonly name = 'SubmitFailedError';
  constructor(
    readonly requestId: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** No outcome of the asked stage came within the wait; `last` is the latest one seen, if any. */
export class OutcomeTimeoutError extends SluiceProducerError {
  override readonly name = 'OutcomeTimeoutError';
  constructor(
    readonly requestId: string,
    readonly timeoutMs: number,
    readonly last: SubmissionOutcome | undefined,
  ) {
    super(`no outcome for request ${requestId} within ${timeoutMs} ms${last ? ` (last seen: ${last.status})` : ''}`);
  }
}

/** Outcomes are followed only for requests this producer submitted, and only the latest `maxTrackedRequests` of them. */
export class UnknownRequestError extends SluiceProducerError {
  override readonly name = 'UnknownRequestError';
  constructor(readonly requestId: string) {
    super(`request ${requestId} was not submitted through this producer, or was forgotten to bound memory`);
  }
}

/** Following the status topic failed (the consumer crashed or could not join), or the producer was closed. */
export class OutcomeUnavailableError extends SluiceProducerError {
  override readonly name = 'OutcomeUnavailableError';
}

/** The producer was closed; it takes no more submissions. */
export class ProducerClosedError extends SluiceProducerError {
  override readonly name = 'ProducerClosedError';
  constructor() {
    super('the producer is closed');
  }
}
