import { setTimeout as sleep } from 'node:timers/promises';
import { Kafka, logLevel, type Consumer, type ConsumerConfig, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createBatchConsumer, type BatchConsumer } from '../../src/kafka/batch-consumer.js';
import { createLogger } from '../../src/obs/logger.js';
import { startThrowawayKafka, type ThrowawayKafka } from '../support/throwaway-kafka.js';

const TOPIC = 'consumer-restart.t';

/**
 * A BatchConsumer whose kafkajs consumer crashes and is restarted by kafkajs while its broker is
 * down (a throwaway one, stopped and started again with its data). kafkajs drops its consumer
 * group at a crash, so pause and seek throw until the restart makes a new group, and that new
 * group pauses nothing: what the reader paused must stay unfetched, and what it did not pause
 * must be fetched, from the restart on.
 */
describe('a consumer kafkajs restarts after a crash keeps exactly the pauses its reader holds', () => {
  let cluster: ThrowawayKafka;
  let kafka: Kafka;
  let producer: Producer;

  beforeAll(async () => {
    cluster = await startThrowawayKafka();
    kafka = new Kafka({ clientId: 'consumer-restart', brokers: cluster.brokers, logLevel: logLevel.NOTHING, retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 } });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic: TOPIC, numPartitions: 3 }] });
    await admin.disconnect();
    producer = kafka.producer();
    await producer.connect();
  }, 180_000);

  afterAll(async () => {
    await producer?.disconnect().catch(() => undefined);
    await cluster?.close();
  });

  const produce = (label: string) => producer.send({ topic: TOPIC, acks: -1, messages: [0, 1, 2].map((partition) => ({ partition, value: label })) });

  it('pauses taken while kafkajs has no group do not throw, and after the restart only unpaused partitions are fetched until resumed', async () => {
    const seen: { partition: number; value: string }[] = [];
    const joins: string[][] = [];
    const thrownAtCrash: unknown[] = [];
    let crashes = 0;
    let kafkajsConsumer: Consumer | undefined;
    let consumer: BatchConsumer | undefined;
    // The kafkajs consumer the BatchConsumer makes, to watch its crashes and ask it what it pauses.
    const watched = { consumer: (config: ConsumerConfig) => (kafkajsConsumer = kafka.consumer(config)) } as unknown as Kafka;
    consumer = createBatchConsumer({
      kafka: watched,
      settings: { sessionTimeoutMs: 10_000, heartbeatIntervalMs: 1_000 },
      groupId: 'consumer-restart.g',
      topics: [TOPIC],
      maxWaitTimeInMs: 100,
      partitionsConsumedConcurrently: 3,
      eachBatch: async ({ batch, resolveOffset }) => {
        for (const m of batch.messages) {
          seen.push({ partition: batch.partition, value: m.value!.toString() });
          resolveOffset(m.offset);
        }
        const last = batch.messages.at(-1);
        if (last) await consumer!.commitPast(batch.topic, batch.partition, last.offset).catch(() => undefined);
      },
      onAssignment: (owned) => void joins.push([...owned]),
      log: createLogger('silent'),
    });
    const seenOf = (partition: number, value: string) => seen.some((s) => s.partition === partition && s.value === value);
    try {
      await consumer.start();
      kafkajsConsumer!.on(kafkajsConsumer!.events.CRASH, () => {
        crashes++;
        // kafkajs emits the crash after dropping its group and before its restart makes a new one.
        try {
          consumer!.pause(TOPIC, 1);
          consumer!.seek(TOPIC, 1, '0');
        } catch (err) {
          thrownAtCrash.push(err);
        }
      });
      await vi.waitFor(() => expect(joins).toHaveLength(1), { timeout: 30_000, interval: 100 });
      await produce('before');
      await vi.waitFor(() => expect([0, 1, 2].every((p) => seenOf(p, 'before'))).toBe(true), { timeout: 30_000, interval: 100 });

      consumer.pause(TOPIC, 0);
      await cluster.stop();
      await vi.waitFor(() => expect(crashes).toBeGreaterThan(0), { timeout: 60_000, interval: 100 });
      await cluster.start();
      await vi.waitFor(() => expect(joins.length).toBeGreaterThan(1), { timeout: 90_000, interval: 200 });

      expect(thrownAtCrash).toEqual([]);
      // The restarted consumer's own state: what the reader holds paused, nothing else.
      expect(kafkajsConsumer!.paused()).toEqual([{ topic: TOPIC, partitions: [0, 1] }]);
      await produce('after');
      await vi.waitFor(() => expect(seenOf(2, 'after')).toBe(true), { timeout: 30_000, interval: 100 });
      // Several fetch rounds (100 ms each) after partition 2's record came.
      await sleep(1_500);
      expect([seenOf(0, 'after'), seenOf(1, 'after')]).toEqual([false, false]);

      consumer.resume(TOPIC, 0);
      await vi.waitFor(() => expect(seenOf(0, 'after')).toBe(true), { timeout: 30_000, interval: 100 });
      expect(seenOf(1, 'after')).toBe(false);
      expect(kafkajsConsumer!.paused()).toEqual([{ topic: TOPIC, partitions: [1] }]);
    } finally {
      await consumer.stop();
    }
  }, 300_000);
});
