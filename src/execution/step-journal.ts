import type { RedisClient } from '../redis/client.js';
import type { Logger } from '../obs/logger.js';
import type { RedisKeys } from '../redis/keys.js';

/**
 * Completed steps of runs still in progress. At-least-once delivery means a run can be executed
 * again after a crash or rebalance; a step found here is not called again, so its side effect
 * happens once (tools also get an Idempotency-Key of runId:stepId, the second line of defence).
 */
export interface StepJournal {
  recall(runId: string, stepId: string): Promise<{ output: unknown } | undefined>;
  record(runId: string, stepId: string, output: unknown, deadline: number): Promise<void>;
}

/** Outputs outlive the deadline by this much: a retry can never start later than that. */
const KEEP_AFTER_DEADLINE_MS = 3_600_000;

export class RedisStepJournal implements StepJournal {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly logger: Logger,
  ) {}

  /** A Redis outage must not stop work: the step is then called again, protected by its Idempotency-Key. */
  async recall(runId: string, stepId: string): Promise<{ output: unknown } | undefined> {
    try {
      const raw = await this.redis.get(this.keys.stepOutput(runId, stepId));
      return raw === null ? undefined : { output: JSON.parse(raw) as unknown };
    } catch (err) {
      this.logger.warn({ err, runId, stepId }, 'could not read the step journal; calling the step again');
      return undefined;
    }
  }

  async record(runId: string, stepId: string, output: unknown, deadline: number): Promise<void> {
    const ttlMs = Math.max(1_000, deadline - Date.now() + KEEP_AFTER_DEADLINE_MS);
    try {
      await this.redis.set(this.keys.stepOutput(runId, stepId), JSON.stringify(output ?? null), 'PX', ttlMs);
    } catch (err) {
      this.logger.warn({ err, runId, stepId }, 'could not record a completed step; a redelivery would call it again');
    }
  }
}
