import type { KafkaMessage } from 'kafkajs';
import type { RunStatus } from '../events/schemas.js';

/** What the processor knows about an attempt beyond the event itself. */
export interface AttemptContext {
  /** Run-level transient failures before this attempt (carried by the retry topic's header). */
  priorFailures: number;
  firstFailureAt?: number;
  /** An earlier attempt had a step answered by its dependency (carried by the retry topic's header): the run's first output is behind it. */
  outputSeen?: boolean;
  /** The record the attempt came from: archived byte for byte if the run dies. */
  record: { topic: string; partition: number; message: Pick<KafkaMessage, 'offset' | 'key' | 'value'> };
}

/** `retried`: the attempt ended and the run's next attempt waits on the retry topic. */
export type RunOutcome = Extract<RunStatus, 'completed' | 'failed' | 'expired' | 'cancelled'> | 'retried';
