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

/**
 * What a submission's answer may take beyond the produce timeout once its event is handed to
 * Kafka: encoding, the round trip that writes the answer, an event-loop or GC stall.
 */
const ANSWER_GRACE_MS = 10_000;

/**
 * How long a submission's answer can be pending (`kafka.produceTimeoutMs` decides it): the life of
 * the mark the API writes before the produce, and the longest a processor waits on it. Past it the
 * API has answered or died; a run whose API died unanswered is not a refused one, and runs.
 */
export function answerPendingMs(produceTimeoutMs: number): number {
  return produceTimeoutMs + ANSWER_GRACE_MS;
}

export interface RedisCancellationsOptions {
  now?: () => number;
}

/**
 * Cancellation requests as a Redis key per run, written by `DELETE /v1/runs/:id` on any API
 * instance, and read by whichever processor holds the run with the run's progress
 * (src/execution/run-progress.ts).
 *
 * With them, the mark that a submission's answer is still pending. One produce request carries
 * several events and settles as one: an event to a healthy partition can be in Kafka, and picked
 * up by a processor, while the request as a whole is still unacknowledged, and is then answered
 * 503. So the API marks the run pending before the produce and settles the mark with the answer
 * (`markAnswered` on a 202, `withdraw` on a 503); a processor that gets the run first waits for it.
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

  /**
   * Before the produce: the run's answer is not decided, so a processor must not start it yet.
   * A mark left behind by a refusal expires on its own (`answerPendingMs`).
   */
  async markAnswerPending(runId: string, produceTimeoutMs: number): Promise<void> {
    await this.redis.set(this.keys.answerPending(runId), '1', 'PX', answerPendingMs(produceTimeoutMs));
  }

  /** Kafka acknowledged the run and the caller gets its 202: a processor may start it. */
  async markAnswered(runId: string): Promise<void> {
    await this.redis.del(this.keys.answerPending(runId));
  }

  /** Past the deadline no processor starts the run anyway, so the key need not live longer. */
  private async mark(runId: string, deadline: number, reason: CancelReason): Promise<void> {
    const ttlMs = Math.max(deadline + KEY_GRACE_MS - this.now(), KEY_GRACE_MS);
    await this.redis.set(this.keys.cancelRequested(runId), reason, 'PX', ttlMs);
  }
}
