import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Kafka, logLevel } from 'kafkajs';
import { buildDeadLetter, DLQ_HEADER } from '../../src/dlq/dead-letter.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { createKafka } from '../../src/kafka/client.js';
import { ensureTopics, topicNames } from '../../src/kafka/topics.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/obs/logger.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { packageRoot } from '../../src/util/package-root.js';
import { postgresProxy } from '../support/postgres-proxy.js';
import { scrapeMetrics, ADMIN_KEY, TENANT_A_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess, runCli } from './harness.js';


const pool = () => new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });

async function archivedFrom(db: pg.Pool, topic: string): Promise<{ id: string; reason: string; payload: Buffer; headers: Record<string, string>; run_id: string | null; original_offset: string }[]> {
  const { rows } = await db.query('SELECT id, reason, payload, headers, run_id, original_offset FROM dead_letter_events WHERE original_topic = $1 ORDER BY original_offset', [topic]);
  return rows;
}

/** Dead letters written straight to the DLQ topic, as a processor would, for the sink to archive. */
async function produceDeadLetters(namespace: string, count: number): Promise<string> {
  const kafkaConfig = { ...loadConfig({ env: {} }).kafka, brokers: inject('infra').kafkaBrokers };
  const kafka = createKafka(kafkaConfig, createLogger('silent'), 'dlq-test');
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, kafkaConfig, namespace);
  await admin.disconnect();
  const codec = new EventCodec(new FileSchemaRegistry(join(packageRoot(), '.sluice', 'schema-registry')));
  const producer = await EventProducer.connect(kafka, codec, topicNames(namespace));
  const origin = `${namespace}sluice.runs.batch`;
  try {
    await Promise.all(
      Array.from({ length: count }, (_, i) => {
        const { envelope, headers } = buildDeadLetter({
          topic: origin,
          partition: 0,
          message: { offset: String(i), key: Buffer.from('tenant-b'), value: Buffer.from(`payload ${i}`) },
          consumerGroup: `${namespace}sluice.processor`,
          reason: 'decode_error',
          error: new Error(`bad record ${i}`),
          attempts: 1,
          firstFailureAt: Date.now(),
          lastFailureAt: Date.now(),
        });
        return producer.publishDeadLetter(envelope, headers, 30_000);
      }),
    );
  } finally {
    await producer.close();
  }
  return origin;
}

describe('DLQ sink: failed runs and poison come to rest in Postgres', () => {
  const namespace = testNamespace('dlq');
  let sluice: SluiceProcess;
  let api: string;
  let sim: string;
  let db: pg.Pool;
  let configPath: string;

  beforeAll(async () => {
    db = pool();
    const [apiPort, simPort] = [await freePort(), await freePort()];
    configPath = writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, kafka: { partitions: { interactive: 1 } }, processor: { runRetry: { maxAttempts: 1 } } });
    sluice = await startSluice({
      configPath,
      roles: 'provider-sim,status-sink,dlq-sink,processor,api',
      namespace,
    });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
  });

  afterAll(async () => {
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY }).catch(() => undefined);
    await sluice?.stop();
    await db?.end();
  });

  it('archives a poison record with reason decode_error, and the partition keeps flowing', async () => {
    const topics = topicNames(namespace);
    const producer = new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING }).producer();
    await producer.connect();
    const poison = Buffer.from('not avro at all: \x00\x01\x02 garbage');
    await producer.send({ topic: topics.interactive, acks: -1, messages: [{ key: 'tenant-a', value: poison }] });
    await producer.disconnect();

    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '1' } } });
    expect((await waitForStatus(api, submitted.body.runId, TENANT_A_KEY, ['completed', 'failed'], 30_000)).status).toBe('completed');

    const [row] = await eventually(async () => {
      const rows = await archivedFrom(db, topics.interactive);
      return rows.length > 0 ? rows : undefined;
    }, 30_000, 'the poison record in the archive');
    expect(row!.reason).toBe('decode_error');
    expect(row!.payload.equals(poison)).toBe(true);
    expect(row!.run_id).toBeNull();
    expect(row!.headers[DLQ_HEADER.errorClass]).toBe('EventDecodeError');
  }, 90_000);

  it('archives a run that failed for good with every failure header, and the run reads dead_lettered', async () => {
    await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'anthropic', errorStatus: 500, errorRate: 1 } });
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_C_KEY, json: { workflow: 'support-reply', input: { orderId: '2' }, deadlineMs: 20_000 } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;
    const failed = await waitForStatus(api, runId, TENANT_C_KEY, ['failed', 'dead_lettered', 'completed'], 30_000);
    expect(failed.error).toMatchObject({ code: 'dependency_unavailable' });
    const archived = await waitForStatus(api, runId, TENANT_C_KEY, ['dead_lettered'], 30_000);
    expect(archived.error).toMatchObject({ code: 'dependency_unavailable' });

    const { rows } = await db.query('SELECT * FROM dead_letter_events WHERE run_id = $1', [runId]);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row).toMatchObject({ reason: 'dependency_unavailable', tenant_id: 'tenant-c', workflow: 'support-reply', original_topic: topicNames(namespace).interactive, status: 'pending', attempts: 1 });
    expect(row.payload_json).toMatchObject({ runId, tenantId: 'tenant-c', workflow: 'support-reply', attempt: 1 });
    for (const header of Object.values(DLQ_HEADER)) expect(row.headers[header], header).toBeTruthy();
    expect(row.headers[DLQ_HEADER.runId]).toBe(runId);
    expect(row.error_class).toBe('dependency_unavailable');
    const metrics = await (await scrapeMetrics(api)).text();
    expect(metrics).toContain('sluice_dlq_archived_total{tenant="tenant-c",reason="dependency_unavailable"} 1');
    expect(metrics).toMatch(/sluice_dlq_archive_lag_seconds_count \d+/);

    // The fault is fixed: an operator replays the archived run and it completes.
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY });
    const replay = await runCli(['dlq', 'replay', String(row.id), '--config', configPath, '--by', 'test-operator'], namespace);
    expect(replay.code, replay.stderr).toBe(0);
    const completed = await waitForStatus(api, runId, TENANT_C_KEY, ['completed', 'failed'], 30_000);
    expect(completed.status).toBe('completed');
    expect(completed.attempts).toBe(2);
    const { rows: after } = await db.query('SELECT status, replayed_by FROM dead_letter_events WHERE id = $1', [row.id]);
    expect(after[0]).toMatchObject({ status: 'replayed', replayed_by: 'test-operator' });
  }, 90_000);
});

describe('DLQ sink: crashes and outages lose nothing and duplicate nothing', () => {
  let db: pg.Pool;

  beforeAll(() => {
    db = pool();
  });

  afterAll(async () => {
    await db?.end();
  });

  it('killed mid-batch and restarted, it archives each dead letter exactly once', async () => {
    const namespace = testNamespace('dlq-kill');
    const configPath = writeTestConfig({ dlqSink: { batchSize: 20 }, kafka: { partitions: { dlq: 1 }, sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000 } });
    const total = 400;
    const origin = await produceDeadLetters(namespace, total);
    const first = await startSluice({ configPath, roles: 'dlq-sink', namespace });
    await eventually(async () => ((await archivedFrom(db, origin)).length >= 20 ? true : undefined), 30_000, 'the first rows to be archived', 20);
    await first.kill9();
    const partial = (await archivedFrom(db, origin)).length;
    const second = await startSluice({ configPath, roles: 'dlq-sink', namespace });
    try {
      const rows = await eventually(async () => {
        const r = await archivedFrom(db, origin);
        return r.length >= total ? r : undefined;
      }, 60_000, 'every dead letter to be archived');
      expect(partial).toBeLessThan(total);
      expect(rows).toHaveLength(total);
      expect(new Set(rows.map((r) => r.original_offset)).size).toBe(total);
      expect(rows.map((r) => r.payload.toString())).toEqual(Array.from({ length: total }, (_, i) => `payload ${i}`));
    } finally {
      await second.stop();
    }
  }, 120_000);

  it('keeps every dead letter through a 20 s Postgres outage and archives them once it is back', async () => {
    const namespace = testNamespace('dlq-outage');
    const proxy = await postgresProxy(inject('infra').databaseUrl);
    const configPath = writeTestConfig({ dlqSink: { batchSize: 50 } });
    const sink = await startSluice({ configPath, roles: 'dlq-sink', namespace, env: { DATABASE_URL: proxy.url } });
    try {
      await proxy.cut();
      const cutAt = Date.now();
      const origin = await produceDeadLetters(namespace, 100);
      await sink.waitForLog((l) => l.msg === 'could not archive dead letters in Postgres; retrying', 30_000);
      expect(await archivedFrom(db, origin)).toHaveLength(0);
      await new Promise((r) => setTimeout(r, Math.max(0, cutAt + 20_000 - Date.now())));
      await proxy.restore();
      const rows = await eventually(async () => {
        const r = await archivedFrom(db, origin);
        return r.length >= 100 ? r : undefined;
      }, 60_000, 'every dead letter after the outage');
      expect(rows).toHaveLength(100);
    } finally {
      await sink.stop();
      await proxy.close().catch(() => undefined);
    }
  }, 150_000);
});
