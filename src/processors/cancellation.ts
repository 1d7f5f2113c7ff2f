import type { Redis } from 'ioredis';
import { withTimeout } from '../util/with-timeout.js';
import type { Logger } from '../obs/logger.js';
import type { RedisKeys } from '../redis/keys.js';

/** Asked by the processor before each step: has the caller cancelled this run? */
export interface CancellationCheck {
  isCancelRequested(runId: string): Promise<boolean>;
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
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly logger: Logger,
    opts: RedisCancellationsOptions = {},
  ) {
    this.checkTimeoutMs = opts.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
    this.now = opts.now ?? Date.now;
  }

  /** Past the deadline no processor starts the run anyway, so the key need not live longer. */
  async request(runId: string, deadline: number): Promise<void> {
    const ttlMs = Math.max(deadline + KEY_GRACE_MS - this.now(), KEY_GRACE_MS);
    await this.redis.set(this.keys.cancelRequested(runId), '1', 'PX', ttlMs);
  }

  async isCancelRequested(runId: string): Promise<boolean> {
    try {
      return (await withTimeout(this.redis.exists(this.keys.cancelRequested(runId)), this.checkTimeoutMs, 'cancellation check')) === 1;
    } catch (err) {
      this.logger.warn({ err, runId }, 'could not check for a cancellation request; the run goes on');
      return false;
    }
  }
}
