import type { Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { Logger } from '../obs/logger.js';
import { partitionKey, recordKey, type RecordRequest } from './lag-report.js';

export interface RecordReaderOptions {
  kafka: Kafka;
  /** A group of its own, never a Sluice group's: it only exists to be assigned every partition. */
  groupId: string;
  topics: readonly string[];
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  logger: Logger;
  /** Called for every request the consumer sends (the monitor counts them). */
  onRequest?: () => void;
}

interface Wanted {
  topic: string;
  partition: number;
  offset: bigint;
  below: bigint;
  resolve: (timestamp: number | undefined) => void;
}

/** Bytes one fetch may bring per partition and in all: one record is wanted, Kafka sends at least its batch. */
const MAX_BYTES_PER_PARTITION = 64 * 1024;
const MAX_BYTES = 4 * 1024 * 1024;
const FETCH_WAIT_MS = 100;

/**
 * Reads the timestamp of the record at a given offset, without ever committing. kafkajs has no
 * `assign()`, so one long-lived consumer joins a throwaway group of its own (it is the only member
 * and gets every partition of the topics), starts from the end (nothing to read), and keeps every
 * partition paused. To read a record it seeks the partition to the offset, resumes it, takes the
 * first record at or after the offset from the next fetch, and pauses it again. With `autoCommit`
 * off a seek only moves the consumer's position in memory, so no offset is ever written, its own
 * group's included. The last timestamp per partition is cached: a committed offset that has not
 * moved costs nothing to read again.
 *
 * A record at or past `below` (the high watermark when lag was read) means the wanted one was
 * gone: deleted by retention between the two reads, so kafkajs reset the position to the end.
 */
export class RecordReader {
  private readonly consumer: Consumer;
  private readonly log: Logger;
  /** Assigned partitions by topic; empty until the group is joined. */
  private assigned = new Map<string, number[]>();
  private readonly pending = new Map<string, Wanted>();
  private readonly cache = new Map<string, { offset: bigint; timestamp: number }>();
  private readonly joinWaiters = new Set<() => void>();

  constructor(private readonly opts: RecordReaderOptions) {
    this.log = opts.logger.child({ component: 'record-reader' });
    this.consumer = opts.kafka.consumer({
      groupId: opts.groupId,
      sessionTimeout: opts.sessionTimeoutMs,
      heartbeatInterval: opts.heartbeatIntervalMs,
      allowAutoTopicCreation: false,
      maxWaitTimeInMs: FETCH_WAIT_MS,
      maxBytesPerPartition: MAX_BYTES_PER_PARTITION,
      maxBytes: MAX_BYTES,
      retry: { retries: 5, maxRetryTime: 5_000 },
    });
    if (opts.onRequest) this.consumer.on(this.consumer.events.REQUEST, opts.onRequest);
    this.consumer.on(this.consumer.events.GROUP_JOIN, ({ payload }) => this.onAssigned(payload.memberAssignment));
  }

  /** Joins the group; reads are answered once it is assigned the partitions. */
  async start(): Promise<void> {
    await this.consumer.connect();
    await this.consumer.subscribe({ topics: [...this.opts.topics], fromBeginning: false });
    await this.consumer.run({ autoCommit: false, eachBatch: (payload) => this.onBatch(payload) });
  }

  async stop(): Promise<void> {
    for (const w of this.pending.values()) w.resolve(undefined);
    this.pending.clear();
    await this.consumer.disconnect();
  }

  /**
   * The timestamps of the requested records (keyed by `recordKey`) that could be read within
   * `timeoutMs`; a record not read in time, gone, or on a partition not (yet) assigned is absent.
   */
  async timestamps(requests: readonly RecordRequest[], timeoutMs: number): Promise<Map<string, number>> {
    const until = Date.now() + timeoutMs;
    if (this.assigned.size === 0) await this.joinedWithin(timeoutMs);
    const found = new Map<string, number>();
    const reads: Promise<void>[] = [];
    const requested = new Set<string>();
    for (const r of requests) {
      const key = partitionKey(r.topic, r.partition);
      requested.add(key);
      const cached = this.cache.get(key);
      if (cached?.offset === r.offset) {
        found.set(recordKey(r), cached.timestamp);
        continue;
      }
      if (!this.assigned.get(r.topic)?.includes(r.partition) || this.pending.has(key)) continue;
      reads.push(
        new Promise<number | undefined>((resolve) => {
          this.pending.set(key, { topic: r.topic, partition: r.partition, offset: r.offset, below: r.below, resolve });
          this.consumer.seek({ topic: r.topic, partition: r.partition, offset: String(r.offset) });
          this.consumer.resume([{ topic: r.topic, partitions: [r.partition] }]);
        }).then((timestamp) => {
          if (timestamp === undefined) return;
          this.cache.set(key, { offset: r.offset, timestamp });
          found.set(recordKey(r), timestamp);
        }),
      );
    }
    for (const key of this.cache.keys()) if (!requested.has(key)) this.cache.delete(key);
    if (reads.length > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(reads), new Promise((r) => (timer = setTimeout(r, Math.max(0, until - Date.now()))))]);
      clearTimeout(timer);
      for (const [key, w] of this.pending) {
        this.pending.delete(key);
        this.pause(w);
        w.resolve(undefined);
      }
    }
    return found;
  }

  /** Waits (bounded) for the first assignment: a read before it would find no partition. */
  private joinedWithin(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.joinWaiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.joinWaiters.add(wake);
    });
  }

  private onAssigned(assignment: Record<string, number[]>): void {
    this.assigned = new Map(Object.entries(assignment));
    for (const wake of [...this.joinWaiters]) wake();
    // Whatever a rebalance interrupted is read again at the next poll.
    for (const w of this.pending.values()) w.resolve(undefined);
    this.pending.clear();
    this.consumer.pause([...this.assigned].map(([topic, partitions]) => ({ topic, partitions })));
    this.log.debug({ partitions: [...this.assigned.values()].reduce((n, p) => n + p.length, 0) }, 'record reader assigned');
  }

  private async onBatch({ batch }: EachBatchPayload): Promise<void> {
    const key = partitionKey(batch.topic, batch.partition);
    const wanted = this.pending.get(key);
    if (!wanted) return;
    const first = batch.messages.find((m) => BigInt(m.offset) >= wanted.offset);
    if (!first) return;
    this.pending.delete(key);
    this.pause(wanted);
    const timestamp = Number(first.timestamp);
    wanted.resolve(BigInt(first.offset) < wanted.below && Number.isFinite(timestamp) ? timestamp : undefined);
  }

  private pause({ topic, partition }: Wanted): void {
    this.consumer.pause([{ topic, partitions: [partition] }]);
  }
}
