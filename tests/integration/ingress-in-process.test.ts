import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Admin, Consumer, Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AdmissionController } from '../../src/admission/admission-controller.js';
import type { AdmissionDecision } from '../../src/admission/admission-policy.js';
import { IdempotencyStore } from '../../src/admission/idempotency.js';
import { loadConfig } from '../../src/config/load.js';
import type { SluiceConfig } from '../../src/config/schema.js';
import { DLQ_HEADER } from '../../src/dlq/dead-letter.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { statusRequestId } from '../../src/events/ingress-request-id.js';
import { SUBJECTS, type RunStatusChanged } from '../../src/events/schemas.js';
import { IngressConsumer, REOFFER_HEADER, type IngressDeps } from '../../src/ingress/ingress-consumer.js';
import { createKafka } from '../../src/kafka/client.js';
import { headerText } from '../../src/kafka/headers.js';
import { ensureTopics, groupId, topicNames, type TopicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { metricValue } from '../support/metric-value.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { createRedisClient, type RedisClient } from '../../src/redis/client.js';
import { redisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { RetryForwarder } from '../../src/retries/retry-forwarder.js';
import { RedisCancellations } from '../../src/runs/cancellation.js';
import { isAnswerTo, runSubmission, signedRecord } from '../support/ingress-records.js';
import { eventually, testNamespace } from './harness.js';

const SECRET = Buffer.from(randomBytes(32).toString('hex'));
const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'silent');
const schemaDir = mkdtempSync(join(tmpdir(), 'sluice-ingress-in-process-'));
const codec = new EventCodec(new FileSchemaRegistry(schemaDir));
let kafka: Kafka;
let admin: Admin;
let producer: Producer;
let redis: RedisClient;
let scripts: LuaScripts;

/**
 * The ingress in-process against the real broker and Redis (its idempotency keys, answer marks,
 * status, work, retry and DLQ topics), with an admission the test decides: the records of a
 * partition handled at once, and a deferral ended by a re-offer the ingress dead-letters.
 */
beforeAll(async () => {
  const base = loadConfig({ env: { KAFKA_BROKERS: inject('infra').kafkaBrokers.join(',') } });
  kafka = createKafka(base.kafka, logger, 'ingress-in-process-test');
  admin = kafka.admin();
  await admin.connect();
  producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  redis = createRedisClient({ url: inject('infra').redisUrl }, { maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });
  scripts = new LuaScripts(redis);
});

afterAll(async () => {
  await producer?.disconnect();
  await admin?.disconnect();
  redis?.disconnect();
  rmSync(schemaDir, { recursive: true, force: true });
});

/** A namespace of its own, its topics, and what it publishes on its status topic, read from the start. */
async function workspace(label: string): Promise<{ config: SluiceConfig; topics: TopicNames; events: EventProducer; statuses: RunStatusChanged[]; close: () => Promise<void> }> {
  const namespace = testNamespace(label);
  const base = loadConfig({ env: { KAFKA_BROKERS: inject('infra').kafkaBrokers.join(','), REDIS_URL: inject('infra').redisUrl, SLUICE_NAMESPACE: namespace } });
  const config: SluiceConfig = { ...base, kafka: { ...base.kafka, sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { ...base.kafka.partitions, requests: 1, retry: 1 } } };
  await ensureTopics(admin, config.kafka, namespace);
  const topics = topicNames(namespace);
  const events = await EventProducer.connect(kafka, codec, topics);
  const statuses: RunStatusChanged[] = [];
  const reader: Consumer = kafka.consumer({ groupId: `${namespace}test-reader`, maxWaitTimeInMs: 100 });
  await reader.connect();
  await reader.subscribe({ topics: [topics.status], fromBeginning: true });
  await reader.run({ eachMessage: async ({ message }) => void statuses.push(await codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged)) });
  return {
    config,
    topics,
    events,
    statuses,
    close: async () => {
      await reader.disconnect();
      await events.close();
    },
  };
}

/** An ingress on the workspace's topics and Redis keys, admission answered by `decide`, reading `now` for its clock. */
/** Every ingress of this file counts into these. */
const ingressMetrics = createMetrics();

function ingressOf(config: SluiceConfig, events: EventProducer, decide: AdmissionController['decide'], idempotency?: (store: IdempotencyStore) => IngressDeps['idempotency'], now?: () => number): IngressConsumer {
  const keys = redisKeys(config.namespace);
  const store = new IdempotencyStore(scripts, keys, { ttlSec: 600, pendingMs: 60_000, waitMs: 1_000, scope: 'ingress' });
  return new IngressConsumer({
    kafka,
    config,
    codec,
    metrics: ingressMetrics,
    producer: events,
    admission: { decide, withdraw: async () => undefined },
    withdrawals: new RedisCancellations(redis, keys),
    idempotency: idempotency ? idempotency(store) : store,
    secrets: new Map([['tenant-a', SECRET]]),
    logger,
    ...(now ? { now } : {}),
  });
}

const admitted: AdmissionDecision = { outcome: 'admitted', reason: 'capacity_available' };

describe('Kafka ingress: several records of a partition at once', () => {
  const MAX_IN_FLIGHT = 4;
  const BURST = 12;
  /** The burst's record whose key claim the test holds until it lets it go. */
  const SLOW = 2;
  let ws: Awaited<ReturnType<typeof workspace>>;
  let ingress: IngressConsumer;
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
    ws = await workspace('ingress-conc');
    const config: SluiceConfig = { ...ws.config, ingress: { ...ws.config.ingress, maxInFlight: MAX_IN_FLIGHT, recordTimeoutMs: 60_000 } };
    ingress = ingressOf(config, ws.events, async () => admitted, (store) => ({
      claim: async (tenant, key, fingerprint, token) => {
        mostClaiming = Math.max(mostClaiming, ++claiming);
        claims.set(key, (claims.get(key) ?? 0) + 1);
        try {
          if (key === slowKey) await slowHeld;
          return await store.claim(tenant, key, fingerprint, token);
        } finally {
          claiming--;
        }
      },
      store: async (tenant, key, token, answer, keepMs) => {
        // Longer than a claim waits for a claim in flight (waitMs) before calling the key in progress.
        if (key === slowStoreKey) await new Promise((r) => setTimeout(r, 1_500));
        return store.store(tenant, key, token, answer, keepMs);
      },
      forget: (...args) => store.forget(...args),
      answer: (...args) => store.answer(...args),
    }));
    await ingress.start();
  }, 120_000);

  afterAll(async () => {
    letSlowGo();
    await ingress?.stop();
    await ws?.close();
  });

  /** The ingress group's committed position on the one requests partition (-1: none yet). */
  async function committed(): Promise<number> {
    const [offsets] = await admin.fetchOffsets({ groupId: groupId(ws.config.namespace, 'ingress'), topics: [ws.topics.requests] });
    return Number(offsets!.partitions[0]!.offset);
  }

  it('answers the records behind a held one, and commits no further than the held record until it finishes', async () => {
    const burst = Array.from({ length: BURST }, () => runSubmission());
    slowKey = burst[SLOW]!.idempotencyKey;
    const [sent] = await producer.send({ topic: ws.topics.requests, acks: -1, messages: await Promise.all(burst.map((s) => signedRecord(codec, s, SECRET))) });
    const firstOffset = Number(sent!.baseOffset);
    const answered = (i: number) => ws.statuses.some(isAnswerTo(burst[i]!));
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
    for (const s of burst) expect(ws.statuses.filter(isAnswerTo(s)).map((e) => e.status)).toEqual(['queued']);
    expect(new Set(ws.statuses.map((e) => e.runId)).size).toBe(BURST);
  }, 90_000);

  it('takes a resend beside its original in turn: one run, the duplicate answered with the original outcome', async () => {
    const original = runSubmission();
    const resends = [1, 2, 3].map((n) => ({ ...original, requestId: `${original.requestId}-again-${n}` }));
    slowStoreKey = original.idempotencyKey;
    await producer.send({ topic: ws.topics.requests, acks: -1, messages: await Promise.all([original, ...resends].map((s) => signedRecord(codec, s, SECRET))) });
    const answers = await eventually(
      async () => {
        const found = [original, ...resends].map((s) => ws.statuses.find(isAnswerTo(s)));
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

describe('Kafka ingress: a deferral whose re-offer is dead-lettered', () => {
  /** Time enough to restart the ingress before the re-offer comes back. */
  const RETRY_AFTER_SEC = 8;
  let ws: Awaited<ReturnType<typeof workspace>>;
  let first: IngressConsumer | undefined;
  let second: IngressConsumer | undefined;
  let forwarder: RetryForwarder;
  const deadLetters: { reason: string | undefined; runId: string | undefined }[] = [];
  let dlqReader: Consumer;

  beforeAll(async () => {
    ws = await workspace('ingress-dead-deferral');
    forwarder = new RetryForwarder({ kafka, config: ws.config, codec, deadLetters: ws.events, logger, metrics: createMetrics(), maxHoldMs: 500 });
    await forwarder.start();
    dlqReader = kafka.consumer({ groupId: `${ws.config.namespace}test-dlq-reader`, maxWaitTimeInMs: 100 });
    await dlqReader.connect();
    await dlqReader.subscribe({ topics: [ws.topics.dlq], fromBeginning: true });
    await dlqReader.run({ eachMessage: async ({ message }) => void deadLetters.push({ reason: headerText(message.headers, DLQ_HEADER.reason), runId: headerText(message.headers, DLQ_HEADER.runId) }) });
  }, 120_000);

  afterAll(async () => {
    await first?.stop();
    await second?.stop();
    await forwarder?.stop();
    await dlqReader?.disconnect();
    await ws?.close();
  });

  it('ends the run dead_lettered for whoever follows it and keeps that answer under its key; a forged re-offer ends nothing', async () => {
    const deferred: AdmissionDecision = { outcome: 'deferred', reason: 'rate_limited', retryAfterSec: RETRY_AFTER_SEC };
    first = ingressOf(ws.config, ws.events, async () => deferred);
    await first.start();
    const sub = runSubmission({ deadlineMs: 60_000 });
    await producer.send({ topic: ws.topics.requests, acks: -1, messages: [await signedRecord(codec, sub, SECRET)] });
    const deferral = await eventually(async () => ws.statuses.find(isAnswerTo(sub)), 20_000, 'the request deferred');
    expect(deferral).toMatchObject({ status: 'deferred', sequence: 0 });
    // A record naming that run as its re-offer, but not signed: dead-lettered, and the run is untouched.
    const forged = await signedRecord(codec, sub, randomBytes(32));
    await producer.send({ topic: ws.topics.requests, acks: -1, messages: [{ ...forged, headers: { ...forged.headers, [REOFFER_HEADER]: deferral.runId } }] });
    await eventually(async () => (deadLetters.some((d) => d.reason === 'unauthenticated') ? true : undefined), 20_000, 'the forged re-offer dead-lettered');

    // Before the re-offer comes back, the ingress restarts with a config the request no longer meets.
    await first.stop();
    first = undefined;
    const stricter: SluiceConfig = { ...ws.config, api: { ...ws.config.api, deadlineMs: { ...ws.config.api.deadlineMs, max: 30_000 } } };
    second = ingressOf(stricter, ws.events, async () => admitted);
    await second.start();

    const ended = await eventually(async () => ws.statuses.find((e) => e.runId === deferral.runId && e.status !== 'deferred'), 30_000, 'the deferral ended');
    expect(ended).toMatchObject({ status: 'dead_lettered', sequence: 1, requestId: statusRequestId(sub.tenantId, sub.requestId), error: { code: 'invalid_request', retryable: false }, retryAfterSec: null });
    expect(ended.error!.message).toContain('deadlineMs');
    expect(deadLetters.filter((d) => d.reason === 'invalid_request')).toEqual([{ reason: 'invalid_request', runId: deferral.runId }]);

    // Kept under the key: a resend that meets the checks again is answered dead_lettered, under the same run.
    const kept = await new IdempotencyStore(scripts, redisKeys(ws.config.namespace), { ttlSec: 600, pendingMs: 60_000, waitMs: 1_000, scope: 'ingress' }).answer('tenant-a', sub.idempotencyKey);
    expect(kept?.body).toMatchObject({ runId: deferral.runId, outcome: 'dead_lettered', reason: 'invalid_request', decision: 1 });
    expect(ws.statuses.filter((e) => e.runId === deferral.runId).map((e) => [e.status, e.sequence])).toEqual([
      ['deferred', 0],
      ['dead_lettered', 1],
    ]);
  }, 90_000);
});

describe("Kafka ingress: a request's time runs from its record's timestamp", () => {
  /** How far the ingress's clock runs ahead of the broker's: as if it read each record that long after it was written. */
  let lateByMs = 0;
  let ws: Awaited<ReturnType<typeof workspace>>;
  let ingress: IngressConsumer;
  /** Run ids admission was asked about. */
  const asked: string[] = [];
  /** The broker and this test share one machine's clock; what a send's round trip spans, and no more. */
  const SLACK_MS = 1_000;

  beforeAll(async () => {
    ws = await workspace('ingress-record-age');
    ingress = ingressOf(
      ws.config,
      ws.events,
      async (req) => {
        asked.push(req.runId);
        return admitted;
      },
      undefined,
      () => Date.now() + lateByMs,
    );
    await ingress.start();
  }, 120_000);

  afterAll(async () => {
    await ingress?.stop();
    await ws?.close();
  });

  it('measures the deadline from when the record was written, not from when the ingress reads it', async () => {
    lateByMs = 20_000;
    const sub = runSubmission({ deadlineMs: 30_000 });
    const sentFrom = Date.now();
    await producer.send({ topic: ws.topics.requests, acks: -1, messages: [await signedRecord(codec, sub, SECRET)] });
    const sentBy = Date.now();
    const queued = await eventually(async () => ws.statuses.find(isAnswerTo(sub)), 20_000, 'the request answered');
    expect(queued.status).toBe('queued');
    // Read 20 s after it was written: 10 s of its 30 s are left, not 30.
    expect(queued.admittedAt).toBeGreaterThanOrEqual(sentFrom - SLACK_MS);
    expect(queued.admittedAt).toBeLessThanOrEqual(sentBy + SLACK_MS);
    expect(queued.deadline).toBe(queued.admittedAt + 30_000);
    expect(queued.occurredAt - queued.admittedAt).toBeGreaterThanOrEqual(lateByMs - SLACK_MS);
  }, 60_000);

  it('rejects with deadline_unreachable a record older than ingress.maxRecordAgeMs, its deadline still ahead, without asking admission', async () => {
    lateByMs = ws.config.ingress.maxRecordAgeMs + 60_000;
    const sub = runSubmission({ deadlineMs: ws.config.api.deadlineMs.max });
    await producer.send({ topic: ws.topics.requests, acks: -1, messages: [await signedRecord(codec, sub, SECRET)] });
    const rejected = await eventually(async () => ws.statuses.find(isAnswerTo(sub)), 20_000, 'the request answered');
    expect(rejected).toMatchObject({ status: 'rejected', sequence: 0, error: { code: 'deadline_unreachable', retryable: true }, retryAfterSec: 1 });
    expect(rejected.error!.message).toContain('ingress.maxRecordAgeMs');
    expect(rejected.deadline).toBeGreaterThan(rejected.occurredAt);
    expect(asked).not.toContain(rejected.runId);
    expect(await metricValue(ingressMetrics.ingressStaleRecords, { tenant: 'tenant-a' })).toBe(1);
  }, 60_000);
});
