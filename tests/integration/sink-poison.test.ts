import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Kafka } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { REPLACEMENT_CHARACTER as R } from '../../src/db/storable-text.js';
import { buildDeadLetter, DLQ_HEADER } from '../../src/dlq/dead-letter.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunStatusChanged } from '../../src/events/schemas.js';
import { createKafka } from '../../src/kafka/client.js';
import { ensureTopics, topicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { packageRoot } from '../../src/util/package-root.js';
import { scrapeMetrics, TENANT_A_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/** One partition per topic: every record of a test shares a partition, so one stuck record would hold them all. */
const ONE_PARTITION = { interactive: 1, batch: 1, retry: 1, status: 1, dlq: 1 };
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

/** Publishes events straight to a namespace's topics, as a Sluice process would. */
async function eventTools(namespace: string): Promise<{ kafka: Kafka; codec: EventCodec; producer: EventProducer; close: () => Promise<void> }> {
  const defaults = loadConfig({ env: {} }).kafka;
  const kafkaConfig = { ...defaults, brokers: inject('infra').kafkaBrokers, partitions: { ...defaults.partitions, ...ONE_PARTITION } };
  const kafka = createKafka(kafkaConfig, createLogger('silent'), 'sink-poison-test');
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, kafkaConfig, namespace);
  await admin.disconnect();
  const codec = new EventCodec(new FileSchemaRegistry(join(packageRoot(), '.sluice', 'schema-registry')));
  const producer = await EventProducer.connect(kafka, codec, topicNames(namespace));
  return { kafka, codec, producer, close: () => producer.close() };
}

function statusEvent(runId: string, over: Partial<RunStatusChanged> = {}): RunStatusChanged {
  const now = Date.now();
  return {
    runId,
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    class: 'interactive',
    admittedAt: now - 1_000,
    deadline: now + 30_000,
    attempt: 1,
    traceparent: TRACEPARENT,
    sequence: 1,
    status: 'running',
    occurredAt: now,
    message: 'running',
    step: null,
    result: null,
    error: null,
    attemptStartedAt: now,
    ...over,
  };
}

async function metricsText(url: string): Promise<string> {
  return (await scrapeMetrics(url)).text();
}

describe('a run whose input Postgres cannot store as it is', () => {
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, kafka: { partitions: ONE_PARTITION } }),
      roles: 'provider-sim,status-sink,processor,api',
      namespace: testNamespace('sink-text'),
    });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    await sluice?.stop();
  });

  it('completes and reads back, and another tenant submitting right after is not held up', async () => {
    const hostile = {
      // The request: the message reaches the result only as JSON-escaped text.
      escapedNul: '{"workflow":"support-reply","input":{"message":"hi \\u0000"}}',
      // Echoed verbatim by the order-lookup tool into the result: a real NUL, and a lone surrogate.
      nulOrderId: '{"workflow":"support-reply","input":{"orderId":"4\\u00002"}}',
      loneSurrogateOrderId: '{"workflow":"support-reply","input":{"orderId":"4\\ud8002"}}',
      // Not even hostile: a 200-character reply snippet cuts this emoji in half.
      emojiCut: JSON.stringify({ workflow: 'support-reply', input: { message: `${'x'.repeat(178)}\u{1F600}` } }),
    };
    const ids: Record<string, string> = {};
    for (const [name, body] of Object.entries(hostile)) {
      const r = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, body, headers: { 'content-type': 'application/json' } });
      expect(r.status, name).toBe(202);
      ids[name] = r.body.runId;
    }
    const others: string[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_B_KEY, json: { workflow: 'support-reply', input: { message: `order question ${i}` } } });
      expect(r.status).toBe(202);
      others.push(r.body.runId);
    }

    for (const id of others) expect((await waitForStatus(api, id, TENANT_B_KEY, ['completed', 'failed'], 45_000)).status).toBe('completed');
    const done: Record<string, any> = {};
    for (const [name, id] of Object.entries(ids)) {
      done[name] = await waitForStatus(api, id, TENANT_A_KEY, ['completed', 'failed'], 30_000);
      expect(done[name].status, name).toBe('completed');
    }
    const lookup = (run: any) => run.result.steps.find((s: { id: string }) => s.id === 'lookup-order').output;
    expect(lookup(done.nulOrderId).orderId).toBe(`4${R}2`);
    expect(lookup(done.loneSurrogateOrderId).orderId).toBe(`4${R}2`);
    expect(done.emojiCut.result.steps[0].output.text).toMatch(new RegExp(`x${R}$`));
    expect(done.escapedNul.result.text).toContain('hi \\u0000');
    // Made storable, nothing had to be set aside.
    expect(sluice.logs.filter((l) => l.component === 'status-sink' && (l.level as number) >= 50)).toEqual([]);
  }, 120_000);
});

describe('a status event Postgres refuses for good', () => {
  let db: pg.Pool;

  beforeAll(() => {
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
  });

  afterAll(async () => {
    await db?.end();
  });

  it('goes to the DLQ with its bytes and the SQLSTATE, and the events around it are written', async () => {
    const namespace = testNamespace('sink-status');
    const tools = await eventTools(namespace);
    const [before, refused, after] = [randomUUID(), randomUUID(), randomUUID()];
    // 22008: a valid Avro long and JavaScript date, 5003 BC, before Postgres's earliest timestamp.
    // (Not further back: avsc encodes a long below -2^52 with the wrong sign.)
    const bad = statusEvent(refused, { occurredAt: -2.2e14 });
    const events = [statusEvent(before), bad, statusEvent(after), statusEvent(before, { sequence: 2, status: 'completed', message: 'completed', result: '{"text":"done"}' })];
    try {
      // Published before the sink starts, so its first fetch holds them all in one batch.
      for (const e of events) await tools.producer.publishStatus(e, 30_000);
    } finally {
      await tools.close();
    }
    const badBytes = await tools.codec.encode(SUBJECTS.runStatusChanged, bad);
    const opsPort = await freePort();
    const sluice = await startSluice({ configPath: writeTestConfig({ opsPort, kafka: { partitions: ONE_PARTITION } }), roles: 'status-sink,dlq-sink', namespace });
    try {
      const rows = await eventually(async () => {
        const { rows } = await db.query<{ run_id: string; status: string }>('SELECT run_id, status FROM runs WHERE run_id = ANY($1::uuid[]) ORDER BY run_id', [[before, refused, after]]);
        return rows.length === 2 && rows.some((r) => r.run_id === before && r.status === 'completed') ? rows : undefined;
      }, 30_000, 'the events around the refused one');
      expect(rows.map((r) => r.run_id).sort()).toEqual([before, after].sort());

      const { rows: archived } = await eventually(async () => {
        const r = await db.query('SELECT * FROM dead_letter_events WHERE run_id = $1', [refused]);
        return r.rows.length > 0 ? r : undefined;
      }, 30_000, 'the refused event in the DLQ archive');
      expect(archived).toHaveLength(1);
      const row = archived[0];
      expect(row).toMatchObject({ reason: 'postgres_rejected', original_topic: topicNames(namespace).status, original_partition: 0, original_offset: '1', tenant_id: 'tenant-a', error_class: 'PostgresRejectedError', payload_json: null });
      expect(row.error_message).toMatch(/^SQLSTATE 22008: timestamp out of range/);
      expect(Buffer.compare(row.payload, badBytes)).toBe(0);
      expect(row.original_key.toString()).toBe(refused);
      expect(row.headers).toMatchObject({ [DLQ_HEADER.reason]: 'postgres_rejected', [DLQ_HEADER.originalTopic]: topicNames(namespace).status, [DLQ_HEADER.runId]: refused, [DLQ_HEADER.errorClass]: 'PostgresRejectedError' });

      const metrics = await metricsText(`http://127.0.0.1:${opsPort}`);
      expect(metrics).toContain('sluice_sink_poison_total{sink="status",reason="postgres_rejected"} 1');
      expect(metrics).toContain('sluice_status_events_applied_total 3');
    } finally {
      await sluice.stop();
    }
  }, 120_000);

  it('dead-letters nothing when every event fails for a reason that is not their data (a dropped table), and writes them all once it is back', async () => {
    const namespace = testNamespace('sink-systemic');
    const schema = `sink_systemic_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
    await db.query(`CREATE SCHEMA ${schema}`);
    const url = new URL(inject('infra').databaseUrl);
    url.searchParams.set('options', `-c search_path=${schema}`);
    const opsPort = await freePort();
    const sluice = await startSluice({ configPath: writeTestConfig({ opsPort, kafka: { partitions: ONE_PARTITION } }), roles: 'status-sink', namespace, env: { DATABASE_URL: url.toString() } });
    const tools = await eventTools(namespace);
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    try {
      // A bad deploy: the table the sink writes is gone.
      await db.query(`DROP TABLE ${schema}.run_events`);
      for (const id of ids) await tools.producer.publishStatus(statusEvent(id), 30_000);
      await sluice.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('Postgres refuses every status event of the batch'), 30_000);
      await sluice.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('Postgres refuses every status event of the batch') && l.attempt === 3, 30_000);

      // Repaired: the sink writes everything it held, and set nothing aside.
      await db.query(`BEGIN; SET LOCAL search_path TO ${schema}; ${readFileSync(join(packageRoot(), 'migrations', '001_runs.sql'), 'utf8')}; COMMIT;`);
      const { rows } = await eventually(async () => {
        const r = await db.query(`SELECT run_id FROM ${schema}.runs WHERE run_id = ANY($1::uuid[])`, [ids]);
        return r.rows.length === ids.length ? r : undefined;
      }, 30_000, 'every event after the repair');
      expect(rows).toHaveLength(3);
      const metrics = await metricsText(`http://127.0.0.1:${opsPort}`);
      expect(metrics).toMatch(/sluice_sink_write_retries_total\{sink="status",cause="systemic"\} [3-9]/);
      expect(metrics).not.toMatch(/sluice_sink_poison_total\{[^}]*\} [1-9]/);
      const dlq = tools.kafka.admin();
      await dlq.connect();
      const offsets = await dlq.fetchTopicOffsets(topicNames(namespace).dlq);
      await dlq.disconnect();
      expect(offsets.map((o) => o.high)).toEqual(['0']);
    } finally {
      await tools.close();
      await sluice.stop();
      await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    }
  }, 120_000);
});

describe('a dead letter Postgres refuses for good', () => {
  let db: pg.Pool;

  beforeAll(() => {
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
  });

  afterAll(async () => {
    await db?.end();
  });

  it('is archived in minimal form, its DLQ record as raw bytes, and the records around it as they are', async () => {
    const namespace = testNamespace('sink-dlq');
    const origin = `${namespace}sluice.runs.batch`;
    const tools = await eventTools(namespace);
    const letter = (offset: number, runId: string | null) =>
      buildDeadLetter({
        topic: origin,
        partition: 0,
        message: { offset: String(offset), key: Buffer.from('tenant-b'), value: Buffer.from(`payload ${offset}`) },
        consumerGroup: `${namespace}sluice.processor`,
        reason: 'decode_error',
        error: new Error(`bad record ${offset}`),
        attempts: 1,
        firstFailureAt: Date.now(),
        lastFailureAt: Date.now(),
        ...(runId === null ? {} : { run: { runId, tenantId: 'tenant-b', workflow: 'report-digest' } }),
      });
    // 22P02: the run_id column is a uuid.
    const letters = [letter(0, null), letter(1, 'not-a-uuid'), letter(2, null), letter(3, randomUUID())];
    try {
      for (const { envelope, headers } of letters) await tools.producer.publishDeadLetter(envelope, headers, 30_000);
    } finally {
      await tools.close();
    }
    const refusedBytes = await tools.codec.encode(SUBJECTS.deadLetter, letters[1]!.envelope as DeadLetterEnvelope);
    const opsPort = await freePort();
    const sluice = await startSluice({ configPath: writeTestConfig({ opsPort, kafka: { partitions: ONE_PARTITION } }), roles: 'dlq-sink', namespace });
    try {
      const rows = await eventually(async () => {
        const { rows } = await db.query('SELECT * FROM dead_letter_events WHERE original_topic = ANY($1::text[]) ORDER BY original_topic, original_offset', [[origin, topicNames(namespace).dlq]]);
        return rows.length >= 4 ? rows : undefined;
      }, 30_000, 'all four dead letters archived');
      expect(rows.map((r) => [r.original_topic, r.original_offset, r.reason])).toEqual([
        [origin, '0', 'decode_error'],
        [origin, '2', 'decode_error'],
        [origin, '3', 'decode_error'],
        [topicNames(namespace).dlq, '1', 'unarchivable'],
      ]);
      const minimal = rows[3];
      expect(Buffer.compare(minimal.payload, refusedBytes)).toBe(0);
      expect(minimal).toMatchObject({ run_id: null, tenant_id: null, payload_json: null, error_class: 'PostgresRejectedError', status: 'pending' });
      expect(minimal.error_message).toMatch(/^SQLSTATE 22P02: invalid input syntax for type uuid/);
      // The record's own headers still say why it was dead-lettered in the first place.
      expect(minimal.headers[DLQ_HEADER.reason]).toBe('decode_error');
      expect(minimal.headers[DLQ_HEADER.runId]).toBe('not-a-uuid');

      const metrics = await metricsText(`http://127.0.0.1:${opsPort}`);
      expect(metrics).toContain('sluice_sink_poison_total{sink="dlq",reason="unarchivable"} 1');
      expect(metrics).not.toContain('reason="not_archived"');
    } finally {
      await sluice.stop();
    }
  }, 120_000);
});
