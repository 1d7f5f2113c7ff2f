import type { Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { ReplayConnection } from '../../src/dlq/replay-connection.js';
import { createKafka } from '../../src/kafka/client.js';
import { createLogger } from '../../src/obs/logger.js';
import { testNamespace } from './harness.js';

const kafkaConfig = (brokers: string) => loadConfig({ env: { KAFKA_BROKERS: brokers } }).kafka;

/** The DLQ replays' Kafka connection against a real broker, and against an address where none listens. */
describe('ReplayConnection', () => {
  let admin: Admin;
  let brokers: string;

  beforeAll(async () => {
    brokers = inject('infra').kafkaBrokers.join(',');
    admin = createKafka(kafkaConfig(brokers), createLogger('warn'), 'replay-connection-test').admin();
    await admin.connect();
  });

  afterAll(async () => {
    await admin?.disconnect();
  });

  it('connects once and keeps the producer for the next replay, listing the topics again each time', async () => {
    const connection = new ReplayConnection(createKafka(kafkaConfig(brokers), createLogger('warn'), 'replay'), 7_000);
    try {
      const topic = `${testNamespace('replay-conn')}sluice.runs.interactive`;
      const first = await connection.get();
      expect(first.produceTimeoutMs).toBe(7_000);
      expect(first.existingTopics.has(topic)).toBe(false);
      await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
      const second = await connection.get();
      expect(second.producer).toBe(first.producer);
      expect(second.existingTopics.has(topic)).toBe(true);
      await second.producer.send({ topic, messages: [{ value: 'x' }], acks: -1 });
    } finally {
      await connection.close();
    }
  });

  it('gives up within its timeout where no broker answers, and tries afresh on the next replay', async () => {
    const connection = new ReplayConnection(createKafka(kafkaConfig('127.0.0.1:1'), createLogger('silent'), 'replay-down'), 1_000, { connectMs: 1_500, closeMs: 1_000 });
    try {
      for (let i = 0; i < 2; i++) {
        const started = Date.now();
        await expect(connection.get()).rejects.toThrow(/Kafka: connecting/);
        const took = Date.now() - started;
        // Each try waits out its own timeout: the second is a new connection, not the first one's failure again.
        expect(took).toBeGreaterThanOrEqual(1_400);
        expect(took).toBeLessThan(5_000);
      }
    } finally {
      await connection.close();
    }
  });
});
