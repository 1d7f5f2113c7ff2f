import type { Admin, Kafka, Producer } from 'kafkajs';
import { createIdempotentProducer } from '../kafka/client.js';
import { withTimeout } from '../util/with-timeout.js';
import type { ReplayKafka } from './replay-runner.js';

/** How long a replay waits for Kafka to connect or list its topics, and for a client to disconnect. */
export interface ReplayKafkaTimeouts {
  connectMs: number;
  closeMs: number;
}

export const REPLAY_KAFKA_TIMEOUTS: ReplayKafkaTimeouts = { connectMs: 15_000, closeMs: 5_000 };

interface Connection {
  admin: Admin;
  producer: Producer;
}

/**
 * The Kafka clients DLQ replays send with (`sluice dlq replay` and the console): an idempotent
 * producer and an admin client, connected on first use and kept for the next replay. Each use
 * lists the topics again (a replay never creates one, and a topic may have been created since).
 * Every call to Kafka is bounded; a connection that failed, or whose topic listing failed, is
 * dropped and closed, so the next replay connects afresh instead of waiting on a dead one.
 */
export class ReplayConnection {
  private connection: Promise<Connection> | undefined;

  constructor(
    private readonly kafka: Kafka,
    private readonly produceTimeoutMs: number,
    private readonly timeouts: ReplayKafkaTimeouts = REPLAY_KAFKA_TIMEOUTS,
  ) {}

  async get(): Promise<ReplayKafka> {
    const connection = (this.connection ??= this.connect());
    try {
      const { admin, producer } = await connection;
      const topics = await withTimeout(admin.listTopics(), this.timeouts.connectMs, 'Kafka: listing topics');
      return { producer, existingTopics: new Set(topics), produceTimeoutMs: this.produceTimeoutMs };
    } catch (err) {
      if (this.connection === connection) {
        this.connection = undefined;
        void connection.then((c) => this.disconnect(c), () => undefined);
      }
      throw err;
    }
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    await connection?.then((c) => this.disconnect(c), () => undefined);
  }

  private async connect(): Promise<Connection> {
    const c = { admin: this.kafka.admin(), producer: createIdempotentProducer(this.kafka) };
    try {
      await withTimeout(c.admin.connect(), this.timeouts.connectMs, 'Kafka: connecting');
      await withTimeout(c.producer.connect(), this.timeouts.connectMs, 'Kafka: connecting the producer');
      return c;
    } catch (err) {
      await this.disconnect(c);
      throw err;
    }
  }

  private async disconnect(c: Connection): Promise<void> {
    await Promise.allSettled([withTimeout(c.admin.disconnect(), this.timeouts.closeMs, 'Kafka: disconnecting'), withTimeout(c.producer.disconnect(), this.timeouts.closeMs, 'Kafka: disconnecting the producer')]);
  }
}
