import type { EachBatchPayload, Kafka, TopicPartitionOffset } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import type { Logger } from '../obs/logger.js';

/** One key per topic-partition, for maps of per-partition state. */
export const partitionKey = (topic: string, partition: number): string => `${topic}\u0000${partition}`;

export function splitPartitionKey(key: string): [string, number] {
  const at = key.lastIndexOf('\u0000');
  return [key.slice(0, at), Number(key.slice(at + 1))];
}

/** The position after `offset`: where a restart reads from once every record up to it is handled. */
export const offsetAfter = (offset: string): string => (BigInt(offset) + 1n).toString();

export interface BatchConsumerOptions {
  kafka: Kafka;
  /** The session timeout also bounds each step of `stop`: past it the group has moved the partitions on anyway. */
  settings: Pick<SluiceConfig['kafka'], 'sessionTimeoutMs' | 'heartbeatIntervalMs'>;
  groupId: string;
  topics: string[];
  /** Longest a fetch long-polls: how soon a resumed partition, or a stop, is noticed. */
  maxWaitTimeInMs: number;
  partitionsConsumedConcurrently: number;
  eachBatch: (payload: EachBatchPayload) => Promise<void>;
  /** After each join, with what this member owns now; partitions it paused and lost are resumed already. */
  onAssignment?: (owned: ReadonlySet<string>, assignment: Record<string, number[]>) => void;
  log: Logger;
}

/**
 * A kafkajs consumer as Sluice's four readers use it: manual commits only (`autoCommit: false`,
 * offsets resolved by the reader), reading from the beginning when the group has no offset yet,
 * never creating topics.
 */
export interface BatchConsumer {
  readonly groupId: string;
  start(): Promise<void>;
  /** Stops fetching, lets `drain` settle the work in hand, then leaves the group. */
  stop(drain?: () => Promise<void>): Promise<void>;
  /**
   * Stops fetching the partition until `resume`, also across a restart of the kafkajs consumer
   * after a crash (put back at its join); never throws, even while kafkajs has no group.
   */
  pause(topic: string, partition: number): void;
  resume(topic: string, partition: number): void;
  seek(topic: string, partition: number, offset: string): void;
  /** Commits positions as given: each the next offset to read. */
  commit(offsets: TopicPartitionOffset[]): Promise<void>;
  /** Commits past `offset`: every record of the partition up to it is handled. */
  commitPast(topic: string, partition: number, offset: string): Promise<void>;
}

/** Waits before restarting a consumer kafkajs gave up on: doubling from 200 ms to 5 s, reset by a join. */
export function consumerRestartDelayMs(restartsSinceJoin: number): number {
  return Math.min(5_000, 200 * 2 ** Math.min(restartsSinceJoin, 5));
}

export function createBatchConsumer(opts: BatchConsumerOptions): BatchConsumer {
  const { kafka, settings, groupId, log } = opts;
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: settings.sessionTimeoutMs,
    heartbeatInterval: settings.heartbeatIntervalMs,
    allowAutoTopicCreation: false,
    maxWaitTimeInMs: opts.maxWaitTimeInMs,
  });
  let stopping = false;
  let restartsSinceJoin = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  /** Partitions this consumer paused and has not resumed. */
  const paused = new Map<string, { topic: string; partition: number }>();

  /**
   * Between a crash and the restarted consumer's join kafkajs has no consumer group: its pause,
   * resume and seek throw, and it fetches nothing. The restarted consumer starts with nothing
   * paused and reads from the committed offsets (never past a record still in hand), so what the
   * call would have done is done at the join (pauses) or needs nothing (resumes, seeks).
   */
  const atKafka = (what: string, topic: string, partition: number, call: () => void) => {
    try {
      call();
    } catch (err) {
      log.debug({ err, topic, partition }, `no consumer group to ${what} at now; the next join sets it right`);
    }
  };

  const resume = (topic: string, partition: number) => {
    paused.delete(partitionKey(topic, partition));
    atKafka('resume', topic, partition, () => consumer.resume([{ topic, partitions: [partition] }]));
  };

  const pauseAtKafka = (topic: string, partition: number) => atKafka('pause', topic, partition, () => consumer.pause([{ topic, partitions: [partition] }]));

  /**
   * kafkajs keeps a partition's pause across assignments, so a paused partition that went
   * elsewhere and later comes back would never be fetched again: resume the ones lost.
   */
  const onJoin = (assignment: Record<string, number[]>) => {
    restartsSinceJoin = 0;
    const owned = new Set(Object.entries(assignment).flatMap(([topic, partitions]) => partitions.map((p) => partitionKey(topic, p))));
    for (const [key, { topic, partition }] of [...paused]) {
      if (!owned.has(key)) resume(topic, partition);
      // A consumer restarted after a crash fetches every partition again; what its reader paused stays paused.
      else pauseAtKafka(topic, partition);
    }
    opts.onAssignment?.(owned, assignment);
  };

  const run = async () => {
    await consumer.connect();
    await consumer.subscribe({ topics: opts.topics, fromBeginning: true });
    await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: opts.partitionsConsumedConcurrently, eachBatch: opts.eachBatch });
  };

  /**
   * kafkajs restarts a crashed consumer only after a retriable error. Errors it deems final, such
   * as "Failed to find group coordinator" while a restarted broker loads its group metadata, would
   * leave this process deaf to its topics for good: they are passing for Sluice, so it restarts
   * the consumer itself, with backoff, until it joins again or is stopped.
   */
  const restart = (err: unknown) => {
    if (stopping || restartTimer) return;
    const delayMs = consumerRestartDelayMs(restartsSinceJoin++);
    log.warn({ err, groupId, delayMs }, 'consumer crashed with an error kafkajs does not restart after; restarting it');
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      if (stopping) return;
      run().catch((failed: unknown) => restart(failed));
    }, delayMs);
  };

  /** A kafkajs call that may wait on the broker or the batch in hand, bounded so a stop always ends. */
  const bounded = async (what: string, call: Promise<void>) => {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      timer = setTimeout(() => resolve('expired'), settings.sessionTimeoutMs);
    });
    try {
      if ((await Promise.race([call, expired])) === 'expired') log.warn({ groupId, waitedMs: settings.sessionTimeoutMs }, `consumer ${what} did not finish in time; going on`);
    } finally {
      clearTimeout(timer);
    }
  };

  return {
    groupId,
    async start() {
      consumer.on(consumer.events.GROUP_JOIN, (e) => onJoin(e.payload.memberAssignment));
      // kafkajs logs the crash itself and restarts after a retriable one.
      consumer.on(consumer.events.CRASH, (e) => {
        if (!e.payload.restart) restart(e.payload.error);
      });
      await run();
    },
    async stop(drain) {
      stopping = true;
      clearTimeout(restartTimer);
      if (drain) {
        await bounded('stop', consumer.stop());
        await drain();
      }
      await bounded('disconnect', consumer.disconnect());
    },
    pause(topic, partition) {
      paused.set(partitionKey(topic, partition), { topic, partition });
      pauseAtKafka(topic, partition);
    },
    resume,
    seek(topic, partition, offset) {
      atKafka('seek', topic, partition, () => consumer.seek({ topic, partition, offset }));
    },
    commit: (offsets) => consumer.commitOffsets(offsets),
    commitPast: (topic, partition, offset) => consumer.commitOffsets([{ topic, partition, offset: offsetAfter(offset) }]),
  };
}
