import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Admin, Consumer, IHeaders, Kafka, Producer } from 'kafkajs';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { SluiceConfig } from '../../src/config/schema.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunClass, type RunRequested } from '../../src/events/schemas.js';
import { createKafka } from '../../src/kafka/client.js';
import { ensureTopics, groupId, topicNames, type TopicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { RetryForwarder } from '../../src/retries/retry-forwarder.js';
import { retryRecord } from '../../src/retries/retry-headers.js';
import { eventually, testNamespace } from './harness.js';

/**
 * The forwarder in-process against the real broker: records are written straight to the retry
 * topic, and what reaches the work topics is read back with its broker timestamp, which is the
 * moment of the forward whatever the reader's own lag.
 */

interface Forwarded {
  topic: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: IHeaders;
  /** CreateTime set by the forwarder's producer. */
  at: number;
}

const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'silent');
const schemaDir = mkdtempSync(join(tmpdir(), 'sluice-retry-fwd-'));
const codec = new EventCodec(new FileSchemaRegistry(schemaDir));
let kafka: Kafka;
let admin: Admin;
let producer: Producer;

/** Per test: its own topics and groups, and everything it started, stopped afterwards. */
let cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  const base = loadConfig({ env: { KAFKA_BROKERS: inject('infra').kafkaBrokers.join(',') } });
  kafka = createKafka(base.kafka, logger, 'retry-forwarder-test');
  admin = kafka.admin();
  await admin.connect();
  producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
});

afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

afterAll(async () => {
  await producer?.disconnect();
  await admin?.disconnect();
  rmSync(schemaDir, { recursive: true, force: true });
});

function configFor(label: string, produceTimeoutMs = 5_000): SluiceConfig {
  const base = loadConfig({ env: { KAFKA_BROKERS: inject('infra').kafkaBrokers.join(','), SLUICE_NAMESPACE: testNamespace(`rf-${label}`) } });
  return {
    ...base,
    kafka: { ...base.kafka, sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 2, batch: 2, retry: 3, status: 1, dlq: 1, requests: 1 } },
    processor: { ...base.processor, produceTimeoutMs },
  };
}

/** Everything that reaches the work topics, from the beginning. */
async function readWorkTopics(topics: TopicNames, namespace: string): Promise<Forwarded[]> {
  const forwarded: Forwarded[] = [];
  const reader: Consumer = kafka.consumer({ groupId: `${namespace}test-reader`, maxWaitTimeInMs: 100 });
  await reader.connect();
  await reader.subscribe({ topics: [topics.interactive, topics.batch], fromBeginning: true });
  await reader.run({
    eachMessage: async ({ topic, message }) => {
      forwarded.push({ topic, key: message.key, value: message.value, headers: message.headers ?? {}, at: Number(message.timestamp) });
    },
  });
  cleanups.push(() => reader.disconnect());
  return forwarded;
}

async function setup(label: string): Promise<{ config: SluiceConfig; topics: TopicNames; forwarded: Forwarded[] }> {
  const config = configFor(label);
  await ensureTopics(admin, config.kafka, config.namespace);
  const topics = topicNames(config.namespace);
  return { config, topics, forwarded: await readWorkTopics(topics, config.namespace) };
}

function startForwarder(config: SluiceConfig, opts: { dead?: DeadLetterEnvelope[]; backoff?: { baseMs: number; capMs: number } } = {}): { forwarder: RetryForwarder; started: Promise<void> } {
  const dead = opts.dead ?? [];
  const forwarder = new RetryForwarder({
    kafka,
    config,
    codec,
    deadLetters: { publishDeadLetter: async (envelope) => void dead.push(envelope) },
    logger,
    metrics: createMetrics(),
    ...(opts.backoff ? { backoff: opts.backoff } : {}),
  });
  // Stopping twice is harmless, so a test may stop it itself.
  cleanups.push(() => forwarder.stop());
  return { forwarder, started: forwarder.start() };
}

/** The forwarder has joined and owns its partitions, so the first fetch is moments away. */
async function joined(config: SluiceConfig): Promise<void> {
  const group = groupId(config.namespace, 'retry-forwarder');
  await eventually(
    async () => {
      const { groups } = await admin.describeGroups([group]);
      return groups[0]?.state === 'Stable' && groups[0].members.length > 0 ? true : undefined;
    },
    15_000,
    `group ${group} to be stable`,
    50,
  );
}

async function committed(config: SluiceConfig, topic: string, partition: number): Promise<string | undefined> {
  const offsets = await admin.fetchOffsets({ groupId: groupId(config.namespace, 'retry-forwarder'), topics: [topic] });
  return offsets[0]?.partitions.find((p) => p.partition === partition)?.offset;
}

let runSeq = 0;
function run(runClass: RunClass, dueAt: number | null): RunRequested {
  const now = Date.now();
  runSeq++;
  return {
    runId: `019b7a00-0000-7000-8000-${String(runSeq).padStart(12, '0')}`,
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    class: runClass,
    admittedAt: now - 5_000,
    deadline: now + 60_000,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    input: JSON.stringify({ n: runSeq }),
    idempotencyKey: null,
    dueAt,
  };
}

interface Written {
  key: Buffer;
  value: Buffer;
  headers: Record<string, Buffer>;
  dueAt: number;
}

/** A retry as the processor enqueues it, plus a binary header that must survive byte for byte. */
async function writeRetry(topics: TopicNames, partition: number, runClass: RunClass, dueAt: number): Promise<Written> {
  const now = Date.now();
  const { event, headers } = retryRecord(run(runClass, null), { dueAt, failures: 1, error: { kind: 'DependencyUnavailable', message: '529' }, firstFailureAt: now, now, outputSeen: false });
  const written: Written = {
    key: Buffer.from(event.tenantId),
    value: await codec.encode(SUBJECTS.runRequested, event),
    headers: { ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)])), 'x-binary': Buffer.from([0xff, 0x00, 0xc3, 0x28]) },
    dueAt,
  };
  await producer.send({ topic: topics.retry, acks: -1, messages: [{ partition, key: written.key, value: written.value, headers: written.headers }] });
  return written;
}

async function writeRaw(topics: TopicNames, partition: number, value: Buffer, headers: Record<string, string> = {}): Promise<void> {
  await producer.send({ topic: topics.retry, acks: -1, messages: [{ partition, key: 'tenant-a', value, headers }] });
}

const sameBytes = (a: Buffer | null, b: Buffer | null) => a !== null && b !== null && a.equals(b);
const find = (forwarded: Forwarded[], w: Written) => forwarded.find((f) => sameBytes(f.value, w.value));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('retry forwarder', () => {
  it('holds a retry until due, then forwards it unchanged to its class topic and commits', async () => {
    const { config, topics, forwarded } = await setup('due');
    const { started } = startForwarder(config);
    await started;
    await joined(config);

    const interactive = await writeRetry(topics, 0, 'interactive', Date.now() + 1_500);
    const batch = await writeRetry(topics, 1, 'batch', Date.now() + 1_500);
    await eventually(async () => (find(forwarded, interactive) && find(forwarded, batch) ? true : undefined), 10_000, 'both retries forwarded');

    for (const [w, topic] of [[interactive, topics.interactive], [batch, topics.batch]] as const) {
      const f = find(forwarded, w)!;
      expect(f.topic).toBe(topic);
      expect(f.at).toBeGreaterThanOrEqual(w.dueAt);
      expect(f.at).toBeLessThanOrEqual(w.dueAt + 1_000);
      expect(sameBytes(f.key, w.key)).toBe(true);
      expect(Object.keys(f.headers).sort()).toEqual(Object.keys(w.headers).sort());
      for (const [k, v] of Object.entries(w.headers)) expect(sameBytes(f.headers[k] as Buffer, v), `header ${k}`).toBe(true);
    }
    expect(forwarded).toHaveLength(2);
    await eventually(async () => ((await committed(config, topics.retry, 0)) === '1' && (await committed(config, topics.retry, 1)) === '1' ? true : undefined), 5_000, 'offsets committed past the forwards');
  }, 30_000);

  it('forwards an already-due retry at once, reads the event when headers are missing, and dead-letters what it cannot route', async () => {
    const { config, topics, forwarded } = await setup('now');
    const dead: DeadLetterEnvelope[] = [];
    const poison = Buffer.from('not avro \x00\x01\x02');
    await writeRaw(topics, 0, poison);
    // Nothing but the Avro body: due time (null = now) and class come from the event.
    const bare = await codec.encode(SUBJECTS.runRequested, run('batch', null));
    await writeRaw(topics, 0, bare);
    // Scheduling headers alone are enough: the body is not the forwarder's to judge.
    const opaque = Buffer.from('opaque body the processor will judge');
    await writeRaw(topics, 0, opaque, { 'sluice-retry-due-at': String(Date.now() - 1_000), 'sluice-retry-class': 'interactive' });
    const due = await writeRetry(topics, 2, 'interactive', Date.now() - 1_000);

    const startedAt = Date.now();
    const { started } = startForwarder(config, { dead });
    await started;
    await eventually(async () => (forwarded.length >= 3 && dead.length >= 1 ? true : undefined), 10_000, 'forwards and the dead letter');
    expect(find(forwarded, due)!.at - startedAt).toBeLessThan(8_000);
    expect(forwarded.find((f) => sameBytes(f.value, bare))?.topic).toBe(topics.batch);
    expect(forwarded.find((f) => sameBytes(f.value, opaque))?.topic).toBe(topics.interactive);
    expect(dead).toHaveLength(1);
    expect(sameBytes(dead[0]!.payload, poison)).toBe(true);
    expect(dead[0]!.originalTopic).toBe(topics.retry);
    expect(dead[0]!.errorClass).toBe('EventDecodeError');
    await eventually(async () => ((await committed(config, topics.retry, 0)) === '3' ? true : undefined), 5_000, 'partition 0 committed past all three');
  }, 30_000);

  it('does not let a retry that is not yet due hold back due retries on other partitions', async () => {
    const { config, topics, forwarded } = await setup('hol');
    const later = await writeRetry(topics, 0, 'interactive', Date.now() + 60_000);
    // Behind a later-due head on the same partition: the documented trade-off keeps it waiting.
    const behind = await writeRetry(topics, 0, 'interactive', Date.now() - 1_000);
    const p1 = await writeRetry(topics, 1, 'batch', Date.now() - 1_000);
    const p2 = await writeRetry(topics, 2, 'interactive', Date.now() + 1_000);

    const { started } = startForwarder(config);
    await started;
    await eventually(async () => (find(forwarded, p1) && find(forwarded, p2) ? true : undefined), 10_000, 'due retries of partitions 1 and 2');
    await sleep(1_000);
    expect(find(forwarded, later)).toBeUndefined();
    expect(find(forwarded, behind)).toBeUndefined();
    expect(await committed(config, topics.retry, 0)).toBe('-1');
  }, 30_000);

  it('commits only after the forward: a forwarder stopped before due leaves the retry to the next one', async () => {
    const { config, topics, forwarded } = await setup('restart');
    const first = startForwarder(config);
    await first.started;
    await joined(config);
    const w = await writeRetry(topics, 0, 'interactive', Date.now() + 3_500);
    // Long enough for the record to be fetched and held, well before it is due.
    await sleep(1_000);
    await first.forwarder.stop();
    expect(forwarded).toHaveLength(0);
    expect(await committed(config, topics.retry, 0)).toBe('-1');

    const second = startForwarder(config);
    await second.started;
    await eventually(async () => (find(forwarded, w) ? true : undefined), 15_000, 'the retry forwarded by the second forwarder');
    expect(find(forwarded, w)!.at).toBeGreaterThanOrEqual(w.dueAt);
    await eventually(async () => ((await committed(config, topics.retry, 0)) === '1' ? true : undefined), 5_000, 'offset committed after the forward');
    await sleep(500);
    expect(forwarded.filter((f) => sameBytes(f.value, w.value)).length).toBeGreaterThanOrEqual(1);
  }, 30_000);

  it('keeps a retry it could not forward, and forwards it after a backoff once the work topic is back', async () => {
    const config = configFor('backoff', 1_000);
    const topics = topicNames(config.namespace);
    // Only the retry topic exists: every forward fails until the work topics are created.
    await admin.createTopics({ topics: [{ topic: topics.retry, numPartitions: 3 }], waitForLeaders: true });
    const w = await writeRetry(topics, 0, 'interactive', Date.now() - 1_000);
    const { started } = startForwarder(config, { backoff: { baseMs: 200, capMs: 1_000 } });
    await started;
    await joined(config);
    await sleep(2_500);
    expect(await committed(config, topics.retry, 0)).toBe('-1');

    await ensureTopics(admin, config.kafka, config.namespace);
    const forwarded = await readWorkTopics(topics, config.namespace);
    await eventually(async () => (find(forwarded, w) ? true : undefined), 15_000, 'the retry forwarded once the topic exists');
    expect(find(forwarded, w)!.topic).toBe(topics.interactive);
    await eventually(async () => ((await committed(config, topics.retry, 0)) === '1' ? true : undefined), 5_000, 'offset committed after the forward');
  }, 30_000);

  it('stops promptly while a partition is held', async () => {
    const { config, topics, forwarded } = await setup('stop');
    const { forwarder, started } = startForwarder(config);
    await started;
    await joined(config);
    await writeRetry(topics, 0, 'interactive', Date.now() + 60_000);
    await sleep(1_000);
    const t0 = Date.now();
    await forwarder.stop();
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(forwarded).toHaveLength(0);
    expect(await committed(config, topics.retry, 0)).toBe('-1');
  }, 30_000);
});
