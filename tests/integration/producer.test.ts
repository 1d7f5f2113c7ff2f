import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { topicNames } from '../../src/kafka/topics.js';
import { OutcomeTimeoutError, SluiceProducer, UnknownRequestError } from '../../src/producers/index.js';
import { freePort, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

const SECRET_A = randomBytes(32).toString('hex');
const SECRET_C = randomBytes(32).toString('hex');
const INPUT = { message: 'Where is order 42?', orderId: '42' };

/**
 * SluiceProducer against a running Sluice (every role in one process, real Kafka, Redis and
 * Postgres): a run submitted through the ingress followed to its end, a duplicate key answered
 * with the same run, and a deferral from an empty bucket followed by admission.
 */
describe('SluiceProducer against Sluice', () => {
  const namespace = testNamespace('producer');
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-producer-'));
  const registry = { dir: join(stateDir, 'schema-registry') };
  let sluice: SluiceProcess;
  let tenantA: SluiceProducer;
  let tenantC: SluiceProducer;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({
        api: { port: apiPort },
        simulator: { port: simPort },
        ingress: { backoff: { baseMs: 50, capMs: 1_000 } },
        tenants: {
          // One token, one more a second and a half later: a second request at once is deferred, then admitted.
          'tenant-a': { ingress: { secretEnv: 'TEST_INGRESS_SECRET_A' }, admission: { bucket: { capacity: 1, refillPerSec: 0.7 } } },
          'tenant-c': { ingress: { secretEnv: 'TEST_INGRESS_SECRET_C' } },
        },
      }),
      roles: 'provider-sim,status-sink,dlq-sink,processor,ingress,api',
      namespace,
      env: { SLUICE_STATE_DIR: stateDir, TEST_INGRESS_SECRET_A: SECRET_A, TEST_INGRESS_SECRET_C: SECRET_C },
    });
    const brokers = inject('infra').kafkaBrokers;
    tenantA = new SluiceProducer({ brokers, tenantId: 'tenant-a', secret: SECRET_A, registry, namespace });
    tenantC = new SluiceProducer({ brokers, tenantId: 'tenant-c', secret: SECRET_C, registry, namespace });
  }, 120_000);

  afterAll(async () => {
    await tenantA?.close();
    await tenantC?.close();
    expect(await sluice?.stop()).toBe(0);
  });

  it('submits a run through the ingress and follows it to completion', async () => {
    const { requestId } = await tenantC.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey: randomUUID(), deadlineMs: 30_000 });
    const admitted = await tenantC.awaitOutcome(requestId, { timeoutMs: 30_000 });
    expect(admitted).toMatchObject({ requestId, status: 'queued', runId: expect.any(String) });
    const done = await tenantC.awaitOutcome(requestId, { until: 'terminal', timeoutMs: 30_000 });
    expect(done).toMatchObject({ requestId, runId: admitted.runId, status: 'completed' });
    expect(done.result).toBeDefined();
  }, 60_000);

  it('answers a duplicate idempotency key with the same run', async () => {
    const idempotencyKey = randomUUID();
    const first = await tenantC.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey });
    const queued = await tenantC.awaitOutcome(first.requestId, { timeoutMs: 30_000 });
    const again = await tenantC.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey });
    expect(again.requestId).not.toBe(first.requestId);
    const replayed = await tenantC.awaitOutcome(again.requestId, { timeoutMs: 30_000 });
    expect(replayed).toMatchObject({ status: 'queued', runId: queued.runId });
    expect((await tenantC.awaitOutcome(first.requestId, { until: 'terminal', timeoutMs: 30_000 })).status).toBe('completed');
  }, 60_000);

  it("defers a request while the tenant's bucket is empty, then admits it under the same run id", async () => {
    const first = await tenantA.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey: randomUUID(), deadlineMs: 30_000 });
    const second = await tenantA.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey: randomUUID(), deadlineMs: 30_000 });
    expect(await tenantA.awaitOutcome(first.requestId, { timeoutMs: 30_000 })).toMatchObject({ status: 'queued' });
    const deferred = await tenantA.awaitOutcome(second.requestId, { until: 'answer', timeoutMs: 30_000 });
    expect(deferred).toMatchObject({ status: 'deferred', code: 'rate_limited', retryAfterSec: expect.any(Number) });
    const admitted = await tenantA.awaitOutcome(second.requestId, { until: 'admission', timeoutMs: 30_000 });
    expect(admitted).toMatchObject({ status: 'queued', runId: deferred.runId });
    expect(admitted.occurredAt).toBeGreaterThan(deferred.occurredAt);
    expect((await tenantA.awaitOutcome(second.requestId, { until: 'terminal', timeoutMs: 30_000 })).status).toBe('completed');
  }, 60_000);

  it('bounds every wait, and knows only its own requests', async () => {
    const { requestId } = await tenantC.submit({ workflow: 'no-such-workflow', input: {}, idempotencyKey: randomUUID() });
    // Dead-lettered (unknown workflow): no status comes, and the wait ends.
    await expect(tenantC.awaitOutcome(requestId, { timeoutMs: 2_000 })).rejects.toBeInstanceOf(OutcomeTimeoutError);
    await expect(tenantA.awaitOutcome(requestId, { timeoutMs: 2_000 })).rejects.toBeInstanceOf(UnknownRequestError);
  }, 30_000);

  it("does not take another tenant's answer to a request id it also used", async () => {
    const requestId = randomUUID();
    // Tenant-c's own request gets no status (dead-lettered: unknown workflow), so any answer its wait takes is tenant-a's.
    await tenantC.submit({ workflow: 'no-such-workflow', input: {}, idempotencyKey: randomUUID(), requestId });
    const victim = tenantC.awaitOutcome(requestId, { until: 'answer', timeoutMs: 10_000 }).catch((e: unknown) => e);
    await tenantA.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey: randomUUID(), requestId });
    const own = await tenantA.awaitOutcome(requestId, { until: 'answer', timeoutMs: 8_000 });
    expect(own).toMatchObject({ requestId, runId: expect.any(String) });
    expect(await victim).toBeInstanceOf(OutcomeTimeoutError);
  }, 30_000);

  it('leaves no consumer group behind: its follower commits no offsets, and a close deletes its group', async () => {
    const brokers = inject('infra').kafkaBrokers;
    const admin = new Kafka({ clientId: 'producer-groups-test', brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const producer = new SluiceProducer({ brokers, tenantId: 'tenant-c', secret: SECRET_C, registry, namespace, clientId: 'groups-check' });
    const ownGroups = async () => (await admin.listGroups()).groups.map((g) => g.groupId).filter((id) => id.startsWith(`${namespace}sluice-producer.groups-check.`));
    try {
      const { requestId } = await producer.submit({ workflow: 'support-reply', input: INPUT, idempotencyKey: randomUUID(), deadlineMs: 30_000 });
      expect((await producer.awaitOutcome(requestId, { until: 'terminal', timeoutMs: 30_000 })).status).toBe('completed');
      const [groupId, ...others] = await ownGroups();
      expect(groupId).toBeDefined();
      expect(others).toEqual([]);
      // It has read the status records of its run by now; a commit would show here.
      const offsets = await admin.fetchOffsets({ groupId: groupId!, topics: [topicNames(namespace).status] });
      expect(offsets.flatMap((t) => t.partitions.map((p) => p.offset)).every((o) => o === '-1')).toBe(true);
      await producer.close();
      expect(await ownGroups()).toEqual([]);
    } finally {
      await producer.close();
      await admin.disconnect();
    }
  }, 60_000);
});
