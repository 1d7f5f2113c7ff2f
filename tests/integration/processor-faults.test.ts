import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import type { RunRequested } from '../../src/events/schemas.js';
import { createKafka } from '../../src/kafka/client.js';
import { groupId, topicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { packageRoot } from '../../src/util/package-root.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess, runCli } from './harness.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/throwaway-redis.js';


const TERMINAL = ['completed', 'failed', 'dead_lettered', 'expired', 'cancelled'];

/**
 * The processor when its infrastructure fails: a Redis stopped mid-run and started again empty,
 * runs naming a tenant or workflow that is no longer configured, and a batch run that expired.
 * Whatever happens, every run ends, the partitions' offsets commit, and what could not be
 * processed is in the DLQ archive.
 */
describe('processor faults, end to end', () => {
  const namespace = testNamespace('proc-faults');
  const topics = topicNames(namespace);
  let redisUrl: string;
  let redis: ThrowawayRedis;
  let sluice: SluiceProcess;
  let api: string;
  let db: pg.Pool;
  let producer: EventProducer;

  const archived = async (runId: string) => {
    const { rows } = await db.query<{ id: string; reason: string; error_message: string }>('SELECT id::text AS id, reason, error_message FROM dead_letter_events WHERE namespace = $1 AND run_id = $2', [namespace, runId]);
    return rows[0];
  };
  const statusOf = async (runId: string) => (await db.query<{ status: string; error: { code: string; message: string } | null; attempts: number }>('SELECT status, error, attempts FROM runs WHERE run_id = $1', [runId])).rows[0];

  function runEvent(over: Partial<RunRequested>): RunRequested {
    const admittedAt = Date.now();
    return { runId: randomUUID(), tenantId: 'tenant-a', workflow: 'support-reply', class: 'interactive', admittedAt, deadline: admittedAt + 60_000, attempt: 1, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', input: '{"orderId":"7"}', idempotencyKey: null, dueAt: null, ...over };
  }

  beforeAll(async () => {
    redis = await startThrowawayRedis();
    redisUrl = redis.url;
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 700, anthropicJitterMs: 0 },
      // One partition per run topic, buffering 4: failed runs that never ended would pause it for good.
      kafka: { partitions: { interactive: 1, batch: 1 } },
      processor: { partitionBuffer: 4, infraRetry: { maxAttempts: 3, baseMs: 200, capMs: 500 } },
    });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,dlq-sink,processor,api', namespace, env: { REDIS_URL: redisUrl } });
    api = `http://127.0.0.1:${apiPort}`;
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
    const kafkaConfig = { ...loadConfig({ path: configPath, env: {} }).kafka, brokers: inject('infra').kafkaBrokers };
    const codec = new EventCodec(new FileSchemaRegistry(join(packageRoot(), '.sluice', 'schema-registry')));
    producer = await EventProducer.connect(createKafka(kafkaConfig, createLogger('silent'), 'proc-faults-test'), codec, topics);
  }, 120_000);

  afterAll(async () => {
    await producer?.close();
    await sluice?.stop();
    await redis?.close();
    await db?.end();
  });

  it('dead-letters at once a run whose tenant or workflow is not configured (it was removed since)', async () => {
    const noTenant = runEvent({ tenantId: 'tenant-removed' });
    const noWorkflow = runEvent({ workflow: 'retired-workflow' });
    await producer.publishRunRequested(noTenant, 10_000);
    await producer.publishRunRequested(noWorkflow, 10_000);
    const [tenantRow, workflowRow] = await eventually(async () => {
      const rows = [await archived(noTenant.runId), await archived(noWorkflow.runId)];
      return rows.every(Boolean) ? rows : undefined;
    }, 20_000, 'both runs in the DLQ archive');
    expect(tenantRow).toMatchObject({ reason: 'unknown_tenant', error_message: 'tenant "tenant-removed" is not configured on this processor' });
    expect(workflowRow).toMatchObject({ reason: 'unknown_workflow', error_message: 'workflow "retired-workflow" is not configured on this processor' });
    const ended = await eventually(async () => {
      const s = await statusOf(noWorkflow.runId);
      return s?.status === 'dead_lettered' ? s : undefined;
    }, 20_000, 'the run to read dead_lettered');
    expect(ended.error).toMatchObject({ code: 'unknown_workflow' });
  }, 60_000);

  let expiredRun: RunRequested;
  let expiredRow: string;

  it('archives a batch run that expired while queued with reason expired, and only reports an interactive one', async () => {
    const admittedAt = Date.now() - 2 * 3_600_000;
    expiredRun = runEvent({ workflow: 'report-digest', class: 'batch', admittedAt, deadline: admittedAt + 600_000, input: '{"rows":3}' });
    const lateInteractive = runEvent({ admittedAt, deadline: admittedAt + 30_000 });
    await producer.publishRunRequested(expiredRun, 10_000);
    await producer.publishRunRequested(lateInteractive, 10_000);
    const row = await eventually(async () => archived(expiredRun.runId), 20_000, 'the expired batch run in the DLQ archive');
    expect(row).toMatchObject({ reason: 'expired', error_message: 'the deadline passed before it started' });
    expiredRow = row.id;
    const read = await waitForStatus(api, expiredRun.runId, TENANT_A_KEY, ['dead_lettered'], 20_000);
    expect(read.error).toMatchObject({ code: 'deadline_exceeded' });
    expect((await waitForStatus(api, lateInteractive.runId, TENANT_A_KEY, ['expired'], 20_000)).error).toMatchObject({ code: 'deadline_exceeded' });
    expect(await archived(lateInteractive.runId)).toBeUndefined();
  }, 60_000);

  it('every run ends when Redis is stopped mid-run and started again empty; runs after that complete', async () => {
    const submitted: { runId: string; key: string }[] = [];
    for (let i = 0; i < 12; i++) {
      const key = i % 2 === 0 ? TENANT_A_KEY : TENANT_B_KEY;
      const r = await http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input: { message: `run ${i}`, orderId: String(i) } } });
      expect(r.status).toBe(202);
      submitted.push({ runId: r.body.runId, key });
    }
    await eventually(async () => ((await statusOf(submitted[0]!.runId))?.status === 'running' ? true : undefined), 20_000, 'the first run to start');

    // Down until the processor gives up on a run: its attempts are bounded, not its patience.
    await redis.stop();
    await eventually(
      async () => {
        for (const s of submitted) if ((await archived(s.runId))?.reason === 'infrastructure_error') return true;
        return undefined;
      },
      90_000,
      'a run dead-lettered as infrastructure_error while Redis is down',
      500,
    );
    await redis.start();

    const ends = await Promise.all(submitted.map((s) => waitForStatus(api, s.runId, s.key, TERMINAL, 60_000)));
    const byStatus: Record<string, number> = {};
    for (const e of ends) byStatus[e.status] = (byStatus[e.status] ?? 0) + 1;
    // The runs the outage caught are dead-lettered, named as such and replayable; the rest completed
    // (before the outage, or on a retry after Redis was back).
    const caught = ends.filter((e) => e.status !== 'completed');
    expect(caught.length, JSON.stringify(byStatus)).toBeGreaterThan(0);
    for (const e of caught) {
      expect(e.status).toMatch(/^(failed|dead_lettered)$/);
      expect(e.error.code).toBe('infrastructure_error');
      expect(e.error.message).toMatch(/^gave up after 3 failed attempts: .*\(Redis\) failed: /);
    }
    for (const e of caught) expect((await archived(e.runId))?.reason).toBe('infrastructure_error');

    const after = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { message: 'after the outage' } } });
    expect(after.status).toBe(202);
    expect((await waitForStatus(api, after.body.runId, TENANT_A_KEY, TERMINAL, 30_000)).status).toBe('completed');
  }, 150_000);

  it('replays the expired batch run with a fresh deadline, and it completes', async () => {
    const replay = await runCli(['dlq', 'replay', expiredRow, '--by', 'proc-faults-test'], namespace, { REDIS_URL: redisUrl });
    expect(replay.code, replay.stderr).toBe(0);
    const done = await waitForStatus(api, expiredRun.runId, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000);
    expect(done).toMatchObject({ status: 'completed', attempts: 2 });
  }, 90_000);

  it('commits every offset of the run topics: no record is left unfinished and no partition paused', async () => {
    const kafka = createKafka({ ...loadConfig({ env: {} }).kafka, brokers: inject('infra').kafkaBrokers }, createLogger('silent'), 'proc-faults-admin');
    const admin = kafka.admin();
    await admin.connect();
    try {
      for (const topic of [topics.interactive, topics.batch]) {
        const [end] = await admin.fetchTopicOffsets(topic);
        await eventually(
          async () => {
            const [committed] = await admin.fetchOffsets({ groupId: groupId(namespace, 'processor'), topics: [topic] });
            return committed?.partitions[0]?.offset === end!.high ? true : undefined;
          },
          20_000,
          `the processor's committed offset of ${topic} to reach ${end!.high}`,
        );
      }
    } finally {
      await admin.disconnect();
    }
    const metrics = await http(`${api}/metrics`, { key: ADMIN_KEY });
    expect(metrics.body).toMatch(/^sluice_processor_paused_partitions\{reason="buffer_full"\} 0$/m);
  }, 60_000);
});
