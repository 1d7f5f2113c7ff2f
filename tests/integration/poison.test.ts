import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DLQ_HEADER } from '../../src/dlq/dead-letter.js';
import { topicNames } from '../../src/kafka/topics.js';
import { TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/** Undecodable bytes on a run topic go to the DLQ topic with their context, and the partition keeps flowing. */
describe('poison records', () => {
  const namespace = testNamespace('poison');
  let sluice: SluiceProcess;
  let api: string;
  const kafka = () => new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING });

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, kafka: { partitions: { interactive: 1 } } }),
      roles: 'provider-sim,status-sink,processor,api',
      namespace,
    });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    await sluice?.stop();
  });

  it('dead-letters random bytes with their original bytes and headers, then processes the next run', async () => {
    const topics = topicNames(namespace);
    const producer = kafka().producer();
    await producer.connect();
    const poison = Buffer.from('not avro at all: \x00\x01\x02 garbage');
    await producer.send({ topic: topics.interactive, acks: -1, messages: [{ key: 'tenant-a', value: poison }] });
    await producer.disconnect();

    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '1' } } });
    expect(submitted.status).toBe(202);
    expect((await waitForStatus(api, submitted.body.runId, TENANT_A_KEY, ['completed', 'failed'], 30_000)).status).toBe('completed');

    const consumer = kafka().consumer({ groupId: `${namespace}dlq-reader` });
    await consumer.connect();
    await consumer.subscribe({ topic: topics.dlq, fromBeginning: true });
    const seen: { headers: Record<string, string>; value: Buffer }[] = [];
    await consumer.run({
      eachMessage: async ({ message }) => {
        seen.push({ headers: Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)])), value: message.value! });
      },
    });
    try {
      const [dead] = await eventually(async () => (seen.length > 0 ? seen : undefined), 30_000, 'the dead letter');
      expect(dead!.headers[DLQ_HEADER.originalTopic]).toBe(topics.interactive);
      expect(dead!.headers[DLQ_HEADER.originalOffset]).toBe('0');
      expect(dead!.headers[DLQ_HEADER.reason]).toBe('decode_error');
      expect(dead!.headers[DLQ_HEADER.errorClass]).toBe('EventDecodeError');
      // The envelope carries the original bytes untouched.
      expect(dead!.value.includes(poison)).toBe(true);
      expect(seen).toHaveLength(1);
    } finally {
      await consumer.disconnect();
    }
  }, 90_000);
});
