import type { AttemptContext } from '../../../src/execution/attempt.js';

/** A first attempt read from a work topic, as the consumer hands it over. */
export const ATTEMPT: AttemptContext = {
  priorFailures: 0,
  record: { topic: 'sluice.runs.interactive', partition: 0, message: { offset: '7', key: Buffer.from('tenant-a'), value: Buffer.from('original bytes') } },
};

/** Infrastructure retries fast enough for unit tests with real timers. */
export const INFRA_RETRY = { maxAttempts: 3, baseMs: 5, capMs: 20 };
