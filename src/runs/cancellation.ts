import type { RedisClient } from '../redis/client.js';
import type { RedisKeys } from '../redis/keys.js';

/**
 * Why a run must stop before its next step: its caller cancelled it (`DELETE /v1/runs/:id`), or
 * the submit adapter answered its submission 503 after the event may already have reached Kafka
 * (not acknowledged in time), and a refused submission must not run.
 */
export type CancelReason = 'requested' | 'not_acknowledged';

/** A run's cancellation key as read: absent (null or ''), or a reason; a key written before reasons existed ("1") is the caller's. */
export function cancelReasonOf(value: string | null): CancelReason | undefined {
  if (value === null || value === '') return undefined;
  return value === 'not_acknowledged' ? 'not_acknowledged' : 'requested';
}

/** The key outlives the deadline by this much, so a run redelivered just before its deadline still sees it. */
const KEY_GRACE_MS = 60_000;

export interface RedisCancellationsOptions {
  now?: () => number;
}

/**
 * Cancellation requests as a Redis key per run, written by `DELETE /v1/runs/:id` on any API
 * instance, and read by whichever processor holds the run with the run's progress
 * (src/execution/run-progress.ts).
 */
export class RedisCancellations {
  private readonly now: () => number;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    opts: RedisCancellationsOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** The caller's cancellation. */
  request(runId: string, deadline: number): Promise<void> {
    return this.mark(runId, deadline, 'requested');
  }

  /** A submission answered 503 whose event may still land in Kafka: if it does, it never runs. */
  withdraw(runId: string, deadline: number): Promise<void> {
    return this.mark(runId, deadline, 'not_acknowledged');
  }

  /** Past the deadline no processor starts the run anyway, so the key need not live longer. */
  private async mark(runId: string, deadline: number, reason: CancelReason): Promise<void> {
    const ttlMs = Math.max(deadline + KEY_GRACE_MS - this.now(), KEY_GRACE_MS);
    await this.redis.set(this.keys.cancelRequested(runId), reason, 'PX', ttlMs);
  }
}
