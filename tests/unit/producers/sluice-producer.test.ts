import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kafka, ProducerBatch, ProducerConfig } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { EventCodec } from '../../../src/events/codec.js';
import { FileSchemaRegistry } from '../../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunSubmission } from '../../../src/events/schemas.js';
import { signatureMatches } from '../../../src/ingress/ingress-signature.js';
import { InvalidSubmissionError, ProducerClosedError, SluiceProducer, SubmitFailedError } from '../../../src/producers/index.js';
import { partitionLeaders } from '../../support/fake-partition-leaders.js';

const SECRET = 'a-secret-of-at-least-sixteen-bytes';

/** A kafkajs client whose producer keeps what it is sent, or never answers. */
function fakeKafka(opts: { hang?: boolean } = {}): { kafka: Kafka; sent: ProducerBatch[] } {
  const sent: ProducerBatch[] = [];
  const producer = (config?: ProducerConfig) => {
    const acknowledge = partitionLeaders(config);
    return {
      connect: async () => undefined,
      disconnect: async () => undefined,
      sendBatch: (batch: ProducerBatch) => (opts.hang ? new Promise(() => undefined) : (sent.push(batch), Promise.resolve(acknowledge(batch)))),
    };
  };
  return { kafka: { producer } as unknown as Kafka, sent };
}

describe('SluiceProducer.submit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-producer-'));

  it('produces a signed, tenant-keyed RunSubmission to the ingress topic with acks=all', async () => {
    const { kafka, sent } = fakeKafka();
    const producer = new SluiceProducer({ kafka, tenantId: 'tenant-a', secret: SECRET, registry: { dir }, namespace: 'ns.', followOutcomes: false });
    const { requestId } = await producer.submit({ workflow: 'support-reply', input: { orderId: '42' }, idempotencyKey: 'order-42', deadlineMs: 9_000 });
    expect(sent).toHaveLength(1);
    const batch = sent[0]!;
    expect(batch.acks).toBe(-1);
    expect(batch.topicMessages).toHaveLength(1);
    expect(batch.topicMessages![0]!.topic).toBe('ns.sluice.runs.requests');
    const message = batch.topicMessages![0]!.messages[0]!;
    expect(message.key).toBe('tenant-a');
    const value = message.value as Buffer;
    expect(signatureMatches(Buffer.from(SECRET), 'tenant-a', value, (message.headers as Record<string, string>)['sluice-signature'])).toBe(true);
    const decoded = await new EventCodec(new FileSchemaRegistry(dir)).decode<RunSubmission>(value, SUBJECTS.runSubmission);
    expect(decoded).toEqual({ requestId, idempotencyKey: 'order-42', tenantId: 'tenant-a', workflow: 'support-reply', input: '{"orderId":"42"}', class: null, deadlineMs: 9_000 });
    await producer.close();
    await expect(producer.submit({ workflow: 'support-reply', input: {}, idempotencyKey: 'k' })).rejects.toBeInstanceOf(ProducerClosedError);
  });

  it('refuses a bad request before sending, naming the field', async () => {
    const { kafka, sent } = fakeKafka();
    const producer = new SluiceProducer({ kafka, tenantId: 'tenant-a', secret: SECRET, registry: { dir }, followOutcomes: false });
    await expect(producer.submit({ workflow: 'support-reply', input: {}, idempotencyKey: 'with space' })).rejects.toMatchObject({ name: 'InvalidSubmissionError', field: 'idempotencyKey' });
    expect(sent).toEqual([]);
    expect(() => new SluiceProducer({ kafka, tenantId: 'tenant-a', secret: '' })).toThrow(InvalidSubmissionError);
    expect(() => new SluiceProducer({ tenantId: 'tenant-a', secret: SECRET })).toThrow(InvalidSubmissionError);
  });

  it('gives up on an unacknowledged send within its timeout', async () => {
    const { kafka } = fakeKafka({ hang: true });
    const producer = new SluiceProducer({ kafka, tenantId: 'tenant-a', secret: SECRET, registry: { dir }, followOutcomes: false, submitTimeoutMs: 50 });
    const err = await producer.submit({ workflow: 'support-reply', input: {}, idempotencyKey: 'k', requestId: 'r-1' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SubmitFailedError);
    expect(err).toMatchObject({ requestId: 'r-1' });
  });
});
