import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import type { RunRequested } from '../../src/events/schemas.js';
import { createKafka } from '../../src/kafka/client.js';
import { ensureTopics, topicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { MessageTooLargeError } from '../../src/producers/produce-batcher.js';
import { testNamespace } from './harness.js';

/**
 * The broker's default message.max.bytes (1,048,588) bounds one partition's record batch. Large
 * submissions of one tenant share a partition (runs are keyed by tenant), so without a byte bound
 * per request four of them fail together, and with them every other tenant's run in the request.
 */
const namespace = testNamespace('produce-bytes');
const stateDir = mkdtempSync(join(tmpdir(), 'sluice-produce-bytes-'));
const QUARTER_MIB = 256 * 1024;
let producer: EventProducer;

function run(tenantId: string, inputChars: number): RunRequested {
  const admittedAt = Date.now();
  return {
    runId: randomUUID(),
    tenantId,
    workflow: 'support-reply',
    class: 'interactive',
    admittedAt,
    deadline: admittedAt + 30_000,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    input: JSON.stringify({ message: 'x'.repeat(inputChars) }),
    idempotencyKey: null,
    dueAt: null,
  };
}

beforeAll(async () => {
  const kafkaConfig = { ...loadConfig({ env: {} }).kafka, brokers: inject('infra').kafkaBrokers, partitions: { interactive: 1, batch: 1, retry: 1, status: 1, dlq: 1, requests: 1 } };
  const kafka = createKafka(kafkaConfig, createLogger('silent'), 'produce-bytes-test');
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, kafkaConfig, namespace);
  await admin.disconnect();
  producer = await EventProducer.connect(kafka, new EventCodec(new FileSchemaRegistry(join(stateDir, 'schema-registry'))), topicNames(namespace), { maxBatchBytes: kafkaConfig.maxBatchBytes });
});

afterAll(async () => {
  await producer?.close();
  rmSync(stateDir, { recursive: true, force: true });
});

describe('the event producer against the real broker', () => {
  it('publishes concurrent ~256 KiB records and small ones on one partition, all acknowledged', async () => {
    const large = Array.from({ length: 8 }, () => run('tenant-big', QUARTER_MIB - 1_024));
    const small = Array.from({ length: 20 }, (_, i) => run(`tenant-${i % 3}`, 100));
    const results = await Promise.allSettled([...large, ...small].map((r) => producer.publishRunRequested(r, 20_000)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
  });

  it('refuses one oversized record alone, while the others published with it are acknowledged', async () => {
    const oversized = run('tenant-big', 1_100_000);
    const others = Array.from({ length: 10 }, (_, i) => run(`tenant-${i % 3}`, i % 2 === 0 ? QUARTER_MIB - 1_024 : 100));
    const [tooLarge, ...rest] = await Promise.allSettled([producer.publishRunRequested(oversized, 20_000), ...others.map((r) => producer.publishRunRequested(r, 20_000))]);
    expect(tooLarge.status).toBe('rejected');
    const err = (tooLarge as PromiseRejectedResult).reason as MessageTooLargeError;
    expect(err).toBeInstanceOf(MessageTooLargeError);
    expect(err.bytes).toBeGreaterThan(1_100_000);
    expect(rest.filter((r) => r.status === 'rejected')).toEqual([]);
  });
});
