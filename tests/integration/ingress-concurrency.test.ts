import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Admin, Consumer, Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { IdempotencyStore } from '../../src/admission/idempotency.js';
import type { AdmissionDecision } from '../../src/admission/admission-policy.js';
import { loadConfig } from '../../src/config/load.js';
import type { SluiceConfig } from '../../src/config/schema.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunStatusChanged } from '../../src/events/schemas.js';
import { IngressConsumer } from '../../src/ingress/ingress-consumer.js';
import { createKafka } from '../../src/kafka/client.js';
import { ensureTopics, groupId, topicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { createRedisClient, type RedisClient } from '../../src/redis/client.js';
import { redisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { RedisCancellations } from '../../src/runs/cancellation.js';
import { runSubmission, signedRecord } from '../support/ingress-records.js';
import { eventually, testNamespace } from './harness.js';

const SECRET = Buffer.from(randomBytes(32).toString('hex'));
const MAX_IN_FLIGHT = 4;
const BURST = 12;
/** The burst's record whose key claim the test holds until it lets it go. */
const SLOW = 2;

/**
 * The ingress in-process against the real broker and Redis (its idempotency keys, answer marks,
 * status and work topics), with admission always admitting: one record of a burst is held inside
 * its handling while the test watches the others go past it and the committed offset stay at it.
 */
describe('Kafka ingress: several records of a partition at once', () => {
  const namespace = testNamespace('ingress-conc');
  const topics = topicNames(namespace);
  const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'silent');
  const schemaDir = mkdtempSync(join(tmpdir(), 'sluice-ingress-conc-'));
  const codec = new EventCodec(new FileSchemaRegistry(schemaDir));
  let config: SluiceConfig;
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  let reader: Consumer;
  let events: EventProducer;
  let redis: RedisClient;
  let ingress: IngressConsumer;
  const statuses: RunStatusChanged[] = [];
  /** Claims under way now, and the most at once. */
  let claiming = 0;
  let mostClaiming = 0;
  /** Claims asked for, by idempotency key. */
  const claims = new Map<string, number>();
  let slowKey: string | undefined;
  /** The key whose answer takes longer to store than a duplicate's claim waits. */
  let slowStoreKey: string | undefined;
  let letSlowGo!: () => void;
  const slowHeld = new Promise<void>((resolve) => {
    letSlowGo = resolve;
  });

  beforeAll(async () => {
    const base = loadConfig({ env: { KAFKA_BROKERS: inject('infra').kafkaBrokers.join(','), REDIS_URL: inject('infra').redisUrl, SLUICE_NAMESPACE: namespace } });
    config = {
      ...base,
      kafka: { ...base.kafka, sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { ...base.kafka.partitions, requests: 1 } },
      ingress: { ...base.ingress, maxInFlight: MAX_IN_FLIGHT, recordTimeoutMs: 60_000 },
    };
    kafka = createKafka(config.kafka, logger, 'ingress-concurrency-test');
    admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, config.kafka, namespace);
    producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    events = await EventProducer.connect(kafka, codec, topics);
    redis = createRedisClient(config.redis, { maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });
    const scripts = new LuaScripts(redis);
    const keys = redisKeys(namespace);
    const idempotency = new IdempotencyStore(scripts, keys, { ttlSec: 600, pendingMs: 60_000, waitMs: 1_000, scope: 'ingress' });
    const admitted: AdmissionDecision = { outcome: 'admitted', reason: 'capacity_available' };
    ingress = new IngressConsumer({
      kafka,
      config,
      codec,
      metrics: createMetrics(),
      producer: events,
      admission: { decide: async () => admitted, withdraw: async () => undefined },
      withdrawals: new RedisCancellations(redis, keys),
      idempotency: {
        claim: async (tenant, key, fingerprint, token) => {
          mostClaiming = Math.max(mostClaiming, ++claiming);
          claims.set(key, (claims.get(key) ?? 0) + 1);
          try {
            if (key === slowKey) await slowHeld;
            return await idempotency.claim(tenant, key, fingerprint, token);
          } finally {
            claiming--;
          }
        },
        store: async (tenant, key, token, answer, keepMs) => {
          // Longer than a claim waits for a claim in flight (waitMs) before calling the key in progress.
          if (key === slowStoreKey) await new Promise((r) => setTimeout(r, 1_500));
          return idempotency.store(tenant, key, token, answer, keepMs);
        },
        forget: (...args) => idempotency.forget(...args),
      },
      secrets: new Map([['tenant-a', SECRET]]),
      logger,
    });
    await ingress.start();
    reader = kafka.consumer({ groupId: `${namespace}test-reader`, maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topics: [topics.status], fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => void statuses.push(await codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged)) });
  }, 120_000);

  afterAll(async () => {
    letSlowGo();
    await reader?.disconnect();
    await ingress?.stop();
    await events?.close();
    await producer?.disconnect();
    await admin?.disconnect();
    redis?.disconnect();
    rmSync(schemaDir, { recursive: true, force: true });
  });

  /** The ingress group's committed position on the one requests partition (-1: none yet). */
  async function committed(): Promise<number> {
    const [offsets] = await admin.fetchOffsets({ groupId: groupId(namespace, 'ingress'), topics: [topics.requests] });
    return Number(offsets!.partitions[0]!.offset);
  }

  it('answers the records behind a held one, and commits no further than the held record until it finishes', async () => {
    const burst = Array.from({ length: BURST }, () => runSubmission());
    slowKey = burst[SLOW]!.idempotencyKey;
    const [sent] = await producer.send({ topic: topics.requests, acks: -1, messages: await Promise.all(burst.map((s) => signedRecord(codec, s, SECRET))) });
    const firstOffset = Number(sent!.baseOffset);
    const answered = (i: number) => statuses.some((s) => s.requestId === burst[i]!.requestId);
    const others = burst.map((_, i) => i).filter((i) => i !== SLOW);

    // Only MAX_IN_FLIGHT − 1 places beside the held record: the others got past it as places freed.
    await eventually(async () => (others.every(answered) ? true : undefined), 20_000, 'every record but the held one answered');
    expect(answered(SLOW)).toBe(false);
    expect(mostClaiming).toBeGreaterThan(1);
    expect(mostClaiming).toBeLessThanOrEqual(MAX_IN_FLIGHT);
    // The records before the held one are committed; nothing past it, however long it is held.
    await eventually(async () => ((await committed()) === firstOffset + SLOW ? true : undefined), 10_000, 'the position committed up to the held record');
    const watchUntil = Date.now() + 1_500;
    while (Date.now() < watchUntil) {
      expect(await committed()).toBe(firstOffset + SLOW);
      await new Promise((r) => setTimeout(r, 100));
    }

    letSlowGo();
    await eventually(async () => (answered(SLOW) ? true : undefined), 20_000, 'the held record answered');
    await eventually(async () => ((await committed()) === firstOffset + BURST ? true : undefined), 10_000, 'the whole burst committed');
    for (const s of burst) expect(statuses.filter((e) => e.requestId === s.requestId).map((e) => e.status)).toEqual(['queued']);
    expect(new Set(statuses.map((e) => e.runId)).size).toBe(BURST);
  }, 90_000);

  it('takes a resend beside its original in turn: one run, the duplicate answered with the original outcome', async () => {
    const original = runSubmission();
    const resends = [1, 2, 3].map(() => ({ ...original, requestId: `${original.requestId}-again-${Math.random()}` }));
    slowStoreKey = original.idempotencyKey;
    await producer.send({ topic: topics.requests, acks: -1, messages: await Promise.all([original, ...resends].map((s) => signedRecord(codec, s, SECRET))) });
    const answers = await eventually(
      async () => {
        const found = [original, ...resends].map((s) => statuses.find((e) => e.requestId === s.requestId));
        return found.every((e) => e !== undefined) ? (found as RunStatusChanged[]) : undefined;
      },
      20_000,
      'the original and every resend answered',
    );
    expect(new Set(answers.map((e) => e.runId)).size).toBe(1);
    expect(answers.map((e) => e.status)).toEqual(['queued', 'queued', 'queued', 'queued']);
    // Each claimed once, after the one before it settled: none found the key in progress and was read again.
    expect(claims.get(original.idempotencyKey)).toBe(4);
  }, 60_000);
});
