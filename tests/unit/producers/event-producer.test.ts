import type { Kafka, Producer, ProducerBatch } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { EventCodec } from '../../../src/events/codec.js';
import type { DeadLetterEnvelope } from '../../../src/events/schemas.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { EventProducer } from '../../../src/producers/event-producer.js';
import { brokerAnswer, notRetried } from '../../support/kafka-errors.js';

/** kafkajs producers as the fake Kafka hands them out, each with what was done to it. */
interface FakeProducer {
  id: number;
  connected: boolean;
  disconnected: boolean;
  sent: number;
}

/**
 * A Kafka whose n-th producer answers its sends with `answers[n]` in turn (undefined: acknowledged),
 * and connects unless `refuseConnect` names it.
 */
function fakeKafka(answers: Array<Array<Error | undefined>>, refuseConnect: number[] = []) {
  const producers: FakeProducer[] = [];
  const kafka = {
    producer: () => {
      const p: FakeProducer = { id: producers.length, connected: false, disconnected: false, sent: 0 };
      producers.push(p);
      const own = answers[p.id] ?? [];
      return {
        connect: async () => {
          if (refuseConnect.includes(p.id)) throw new Error('Connection error: connect ECONNREFUSED');
          p.connected = true;
        },
        disconnect: async () => void (p.disconnected = true),
        sendBatch: async (_batch: ProducerBatch) => {
          const answer = own[p.sent++];
          if (answer) throw answer;
          return [];
        },
      } as unknown as Producer;
    },
  } as unknown as Kafka;
  return { kafka, producers };
}

const codec = { encode: async () => Buffer.from('event') } as unknown as EventCodec;
const envelope = { runId: 'run-1' } as DeadLetterEnvelope;

async function connect(kafka: Kafka) {
  const warnings: string[] = [];
  const producer = await EventProducer.connect(kafka, codec, topicNames('ns.'), { lingerMs: 0, logger: { warn: ((_o: unknown, msg: string) => void warnings.push(msg)) as never } });
  const publish = () => producer.publishDeadLetter(envelope, {}, 1_000);
  return { producer, publish, warnings };
}

const outOfOrder = () => notRetried(brokerAnswer('OUT_OF_ORDER_SEQUENCE_NUMBER', 45));

describe('EventProducer when the broker refuses its sequence numbers', () => {
  it('fails that send, then sends with a new producer (a new producer id) and lets the old one go', async () => {
    const { kafka, producers } = fakeKafka([[outOfOrder(), outOfOrder()], []]);
    const { publish, warnings } = await connect(kafka);
    await expect(publish()).rejects.toThrow('OUT_OF_ORDER_SEQUENCE_NUMBER');
    await publish();
    await publish();
    expect(producers.map((p) => ({ id: p.id, connected: p.connected, disconnected: p.disconnected, sent: p.sent }))).toEqual([
      { id: 0, connected: true, disconnected: true, sent: 1 },
      { id: 1, connected: true, disconnected: false, sent: 2 },
    ]);
    expect(warnings).toEqual(["the broker refuses the producer's sequence numbers (kafkajs does not recover from that); replaced it with a new producer id"]);
  });

  it('keeps its producer through failures that retrying mends', async () => {
    const { kafka, producers } = fakeKafka([[new Error('Connection error: connect ECONNREFUSED'), notRetried(brokerAnswer('MESSAGE_TOO_LARGE', 10))]]);
    const { publish } = await connect(kafka);
    await expect(publish()).rejects.toThrow('ECONNREFUSED');
    await expect(publish()).rejects.toThrow('MESSAGE_TOO_LARGE');
    await publish();
    expect(producers).toHaveLength(1);
    expect(producers[0]!.sent).toBe(3);
  });

  it('keeps the old producer when no new one can connect, and tries again at the next such failure', async () => {
    const { kafka, producers } = fakeKafka([[outOfOrder(), outOfOrder()], [], []], [1]);
    const { publish, warnings } = await connect(kafka);
    await expect(publish()).rejects.toThrow('OUT_OF_ORDER_SEQUENCE_NUMBER');
    await expect(publish()).rejects.toThrow('OUT_OF_ORDER_SEQUENCE_NUMBER');
    await publish();
    expect(producers.map((p) => ({ connected: p.connected, disconnected: p.disconnected, sent: p.sent }))).toEqual([
      { connected: true, disconnected: true, sent: 2 },
      { connected: false, disconnected: true, sent: 0 },
      { connected: true, disconnected: false, sent: 1 },
    ]);
    expect(warnings).toHaveLength(2);
  });
});
