import { partitionKey, type BatchConsumer } from './batch-consumer.js';

interface Hold {
  topic: string;
  partition: number;
  timer: NodeJS.Timeout;
}

export interface PartitionHoldOptions {
  /** Longest a partition stays paused before its head record is looked at again. */
  maxHoldMs: number;
  /** Exponential backoff after a failure: doubling from baseMs to capMs, per partition. */
  backoff: { baseMs: number; capMs: number };
}

/**
 * Partitions parked at a record until a time: paused and rewound to that record, with one timer
 * per partition that resumes it. For a reader whose head record is not due yet (the retry
 * forwarder) or could not be handled now (a dependency failed: the record waits, uncommitted,
 * and is read again after a backoff that grows with each failure in a row).
 */
export class PartitionHolds {
  private readonly holds = new Map<string, Hold>();
  /** Consecutive failures per partition, for its backoff; cleared by any record it gets past. */
  private readonly failures = new Map<string, number>();
  private stopped = false;

  constructor(
    private readonly consumer: Pick<BatchConsumer, 'pause' | 'resume' | 'seek'>,
    private readonly opts: PartitionHoldOptions,
  ) {}

  /**
   * Parks the partition at `offset` until `untilMs` (capped by maxHoldMs). The rewind pins where
   * fetching restarts instead of trusting that nothing moved the position past an unresolved
   * record; it also marks the batch in hand stale, so no later record of it is handled.
   */
  hold(topic: string, partition: number, offset: string, untilMs: number): void {
    if (this.stopped) return;
    const key = partitionKey(topic, partition);
    clearTimeout(this.holds.get(key)?.timer);
    this.consumer.pause(topic, partition);
    this.consumer.seek(topic, partition, offset);
    const waitMs = Math.min(Math.max(0, untilMs - Date.now()), this.opts.maxHoldMs);
    this.holds.set(key, { topic, partition, timer: setTimeout(() => this.release(key), waitMs) });
  }

  /** Parks the partition at `offset` for its next backoff; returns the failures in a row and the wait. */
  backOff(topic: string, partition: number, offset: string): { failures: number; waitMs: number } {
    const key = partitionKey(topic, partition);
    const failures = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, failures);
    const { baseMs, capMs } = this.opts.backoff;
    const waitMs = Math.min(capMs, baseMs * 2 ** Math.min(failures - 1, 30));
    this.hold(topic, partition, offset, Date.now() + waitMs);
    return { failures, waitMs };
  }

  /** The partition got past a record: its next failure starts the backoff afresh. */
  succeeded(topic: string, partition: number): void {
    this.failures.delete(partitionKey(topic, partition));
  }

  /** Drops the holds of revoked partitions; the consumer has resumed them already. */
  retain(owned: ReadonlySet<string>): void {
    for (const [key, hold] of this.holds) {
      if (owned.has(key)) continue;
      clearTimeout(hold.timer);
      this.holds.delete(key);
    }
    for (const key of [...this.failures.keys()]) if (!owned.has(key)) this.failures.delete(key);
  }

  stop(): void {
    this.stopped = true;
    for (const hold of this.holds.values()) clearTimeout(hold.timer);
    this.holds.clear();
  }

  private release(key: string): void {
    const hold = this.holds.get(key);
    if (!hold) return;
    this.holds.delete(key);
    this.consumer.resume(hold.topic, hold.partition);
  }
}
