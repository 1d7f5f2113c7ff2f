import type { RedisClient } from '../redis/client.js';
import { withTimeout } from '../util/with-timeout.js';
import type { Logger } from '../obs/logger.js';
import type { RedisKeys } from '../redis/keys.js';

/**
 * Why a run must stop before its next step: its caller cancelled it (`DELETE /v1/runs/:id`), or
 * the submit adapter answered its submission 503 after the event may already have reached Kafka
 * (not acknowledged in time), and a refused submission must not run.
 */
export type CancelReason = 'requested' | 'not_acknowledged';

/** Asked by the processor before a run starts and before each step. */
export interface CancellationCheck {
  cancelReason(runId: string): Promise<CancelReason | undefined>;
}

/** The key outlives the deadline by this much, so a run redelivered just before its deadline still sees it. */
const KEY_GRACE_MS = 60_000;
/** A check sits between steps of a live run: it must never hold the run up for long. */
const DEFAULT_CHECK_TIMEOUT_MS = 250;

export interface RedisCancellationsOptions {
  checkTimeoutMs?: number;
  now?: () => number;
}

/**
 * Cancellation requests as a Redis key per run, written by `DELETE /v1/runs/:id` on any API
 * instance and read by whichever processor holds the run. A Redis outage degrades to "not
 * cancelled": work goes on rather than stopping because a flag could not be read.
 */
export class RedisCancellations implements CancellationCheck {
  private readonly checkTimeoutMs: number;
  private readonly now: () => number;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly logger: Logger,
    opts: RedisCancellationsOptions = {},
  ) {
    this.checkTimeoutMs = opts.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
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

  async cancelReason(runId: string): Promise<CancelReason | undefined> {
    try {
      const value = await withTimeout(this.redis.get(this.keys.cancelRequested(runId)), this.checkTimeoutMs, 'cancellation check');
      if (value === null) return undefined;
      return value === 'not_acknowledged' ? 'not_acknowledged' : 'requested';
    } catch (err) {
      this.logger.warn({ err, runId }, 'could not check for a cancellation request; the run goes on');
      return undefined;
    }
  }

  /** Past the deadline no processor starts the run anyway, so the key need not live longer. */
  private async mark(runId: string, deadline: number, reason: CancelReason): Promise<void> {
    const ttlMs = Math.max(deadline + KEY_GRACE_MS - this.now(), KEY_GRACE_MS);
    await this.redis.set(this.keys.cancelRequested(runId), reason, 'PX', ttlMs);
  }
}
