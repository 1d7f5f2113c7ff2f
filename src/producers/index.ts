/** Sluice's Kafka producer library: the package's `sluice/producer` entry point. */
export { SluiceProducer, type AwaitOptions, type SluiceProducerOptions } from './sluice-producer.js';
export { InvalidSubmissionError, OutcomeTimeoutError, OutcomeUnavailableError, ProducerClosedError, SluiceProducerError, SubmitFailedError, UnknownRequestError } from './producer-errors.js';
export type { OutcomeStage, SubmissionOutcome, SubmitRequest } from './submission.js';
