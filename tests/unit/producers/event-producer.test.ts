import type { Kafka, Producer, ProducerBatch, ProducerConfig } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { EventCodec } from '../../../src/events/codec.js';
import type { DeadLetterEnvelope } from '../../../src/events/schemas.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { EventProducer } from '../../../src/producers/event-producer.js';
import { keysOnPartitions, partitionLeaders } from '../../support/fake-partition-leaders.js';
import { statusEvent } from './status-event.js';
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
    producer: (config?: ProducerConfig) => {
      const p: FakeProducer = { id: producers.length, connected: false, disconnected: false, sent: 0 };
      producers.push(p);
      const own = answers[p.id] ?? [];
      const acknowledge = partitionLeaders(config);
      return {
        connect: async () => {
          if (refuseConnect.includes(p.id)) throw new Error('Connection error: connect ECONNREFUSED');
          p.connected = true;
        },
        disconnect: async () => void (p.disconnected = true),
        sendBatch: async (batch: ProducerBatch) => {
          const answer = own[p.sent++];
          if (answer) throw answer;
          return acknowledge(batch);
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

/**
 * A Kafka of four partitions per topic whose sendBatch answers leave out the partitions
 * `leftOut[n]` names on its n-th send (kafkajs's answer after a leader moved), or throw `throws[n]`.
 */
function kafkaLeavingOut(leftOut: number[][], throws: Array<Error | undefined> = []) {
  const sends: { keys: string[] }[] = [];
  const kafka = {
    producer: (config?: ProducerConfig) => {
      const acknowledge = partitionLeaders(config, 4);
      return {
        connect: async () => undefined,
        disconnect: async () => undefined,
        sendBatch: async (batch: ProducerBatch) => {
          const n = sends.length;
          sends.push({ keys: (batch.topicMessages ?? []).flatMap((t) => t.messages.map((m) => String(m.key))) });
          if (throws[n]) throw throws[n];
          return acknowledge(batch, (_topic, partition) => (leftOut[n] ?? []).includes(partition));
        },
      } as unknown as Producer;
    },
  } as unknown as Kafka;
  return { kafka, sends };
}

describe('EventProducer when Kafka answers a send without some of its partitions', () => {
  const runs = keysOnPartitions(4, 'run');
  const start = async (kafka: Kafka) => {
    const warnings: string[] = [];
    const producer = await EventProducer.connect(kafka, codec, topicNames('ns.'), { lingerMs: 5, logger: { warn: ((_o: unknown, msg: string) => void warnings.push(msg)) as never } });
    const publishAll = () => runs.map((runId) => producer.publishStatus(statusEvent({ runId }), 1_000).then(() => 'acknowledged', (err: Error) => err.name));
    return { publishAll, warnings };
  };

  it('sends the records it left out again at once, and only those, so every caller gets its acknowledgement', async () => {
    const { kafka, sends } = kafkaLeavingOut([[1, 3], []]);
    const { publishAll, warnings } = await start(kafka);
    expect(await Promise.all(publishAll())).toEqual(['acknowledged', 'acknowledged', 'acknowledged', 'acknowledged']);
    expect(sends).toEqual([{ keys: runs }, { keys: [runs[1], runs[3]] }]);
    expect(warnings).toEqual(["Kafka answered without acknowledging some partitions (kafkajs skips them after a leader moved); sending their records again"]);
  });

  it('fails only the records still left out after three sends', async () => {
    const { kafka, sends } = kafkaLeavingOut([[2], [2], [2], []]);
    const { publishAll } = await start(kafka);
    expect(await Promise.all(publishAll())).toEqual(['acknowledged', 'acknowledged', 'PartitionsNotAcknowledgedError', 'acknowledged']);
    expect(sends.map((s) => s.keys)).toEqual([runs, [runs[2]], [runs[2]]]);
  });

  it('fails only the records of a resend that fails: the others were acknowledged', async () => {
    const { kafka } = kafkaLeavingOut([[0]], [undefined, new Error('Connection error: connect ECONNREFUSED')]);
    const { publishAll } = await start(kafka);
    expect(await Promise.all(publishAll())).toEqual(['Error', 'acknowledged', 'acknowledged', 'acknowledged']);
  });
});
