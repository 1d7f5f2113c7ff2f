import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunRequested, type RunStatusChanged } from '../../src/events/schemas.js';
import { groupId, topicNames } from '../../src/kafka/topics.js';
import { isAnswerTo, runSubmission, signedRecord } from '../support/ingress-records.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/throwaway-redis.js';
import { eventually, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

const SECRET = Buffer.from(randomBytes(32).toString('hex'));

/**
 * The ingress against a Redis of its own that the test stops: a record read while Redis is down
 * is neither answered nor committed, and goes through once Redis is back (empty), as one run.
 */
describe('Kafka ingress while Redis is down', () => {
  const namespace = testNamespace('ingress-outage');
  const topics = topicNames(namespace);
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-ingress-outage-'));
  const codec = new EventCodec(new FileSchemaRegistry(join(stateDir, 'schema-registry')));
  let redis: ThrowawayRedis;
  let sluice: SluiceProcess;
  let kafka: Kafka;
  let producer: Producer;
  let reader: Consumer;
  const statuses: RunStatusChanged[] = [];
  const runsRequested: RunRequested[] = [];

  beforeAll(async () => {
    redis = await startThrowawayRedis();
    sluice = await startSluice({
      configPath: writeTestConfig({ ingress: { backoff: { baseMs: 100, capMs: 500 } }, tenants: { 'tenant-a': { ingress: { secretEnv: 'TEST_INGRESS_SECRET_A' } } } }),
      roles: 'ingress',
      namespace,
      env: { REDIS_URL: redis.url, SLUICE_STATE_DIR: stateDir, TEST_INGRESS_SECRET_A: SECRET.toString() },
    });
    kafka = new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING });
    producer = kafka.producer();
    await producer.connect();
    reader = kafka.consumer({ groupId: `${namespace}test-reader`, maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topics: [topics.status, topics.interactive], fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, message }) => {
        if (topic === topics.status) statuses.push(await codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged));
        else runsRequested.push(await codec.decode<RunRequested>(message.value, SUBJECTS.runRequested));
      },
    });
  }, 120_000);

  afterAll(async () => {
    await reader?.disconnect();
    await producer?.disconnect();
    await sluice?.stop();
    await redis?.close();
  });

  async function committed(): Promise<number> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      const [offsets] = await admin.fetchOffsets({ groupId: groupId(namespace, 'ingress'), topics: [topics.requests] });
      return offsets!.partitions.reduce((n, p) => n + Math.max(0, Number(p.offset)), 0);
    } finally {
      await admin.disconnect();
    }
  }

  it('holds the record uncommitted while Redis is down, then admits it once', async () => {
    const before = runSubmission();
    await producer.send({ topic: topics.requests, acks: -1, messages: [await signedRecord(codec, before, SECRET)] });
    await eventually(async () => statuses.find(isAnswerTo(before)), 20_000, 'a record answered with Redis up');
    const committedBefore = await eventually(async () => ((await committed()) >= 1 ? committed() : undefined), 10_000, 'its offset committed');

    await redis.stop();
    const during = runSubmission();
    await producer.send({ topic: topics.requests, acks: -1, messages: [await signedRecord(codec, during, SECRET)] });
    await new Promise((r) => setTimeout(r, 5_000));
    expect(statuses.filter(isAnswerTo(during))).toEqual([]);
    expect(await committed()).toBe(committedBefore);
    await sluice.waitForLog((l) => l.msg === 'could not handle an ingress record now; reading it again after a backoff', 1_000);

    await redis.start();
    const answered = await eventually(async () => statuses.find(isAnswerTo(during)), 30_000, 'the record answered once Redis is back');
    expect(answered.status).toBe('queued');
    expect(runsRequested.filter((r) => r.runId === answered.runId)).toHaveLength(1);
    await eventually(async () => ((await committed()) > committedBefore ? true : undefined), 10_000, 'its offset committed');
  }, 90_000);
});
