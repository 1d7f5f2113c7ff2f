import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunRequested, type RunStatusChanged, type RunSubmission } from '../../src/events/schemas.js';
import { DLQ_HEADER } from '../../src/dlq/dead-letter.js';
import { headerText } from '../../src/kafka/headers.js';
import { topicNames } from '../../src/kafka/topics.js';
import { isAnswerTo, runSubmission, signedRecord } from '../support/ingress-records.js';
import { TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, batchRunNow, eventually, freePort, http, runCli, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * tenant-a's bucket: the burst sends three times its capacity at once. One token refills every
 * REFILL_INTERVAL_MS: far longer than the ingress takes to decide a burst of records in hand at
 * once, so none refills while the burst meets the bucket; the 8 deferred are admitted over ~16 s.
 */
const CAPACITY = 4;
const REFILL_PER_SEC = 0.5;
const REFILL_INTERVAL_MS = 1_000 / REFILL_PER_SEC;
const CLOCK_SLACK_MS = 300;
const DEADLINE_MS = 45_000;

/** Secrets as a file or a variable holds them: text, whose bytes are the HMAC key. */
const SECRET_A = Buffer.from(randomBytes(32).toString('hex'));
const SECRET_C = Buffer.from(randomBytes(32).toString('hex'));
const SECRET_D = Buffer.from(randomBytes(32).toString('hex'));
const TENANT_D_KEY = 'test-key-d';
const TENANT_D_KEY_SHA256 = '351a1c2b68503ec33d48fedbc5c27af309677891eb8986ce6a0b6ed73feb2d4b';

/**
 * The Kafka ingress end to end, every role in one process: producers' RunSubmissions on
 * `sluice.runs.requests`, admitted under tenant-a's small bucket, deferred through the retry topic
 * and admitted as tokens refill, each run once; duplicates answered from the key; forged,
 * unauthorized and mis-addressed records dead-lettered, never run.
 */
describe('Kafka ingress (all roles in one process)', () => {
  const namespace = testNamespace('ingress');
  const topics = topicNames(namespace);
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-ingress-'));
  const codec = new EventCodec(new FileSchemaRegistry(join(stateDir, 'schema-registry')));
  let sluice: SluiceProcess;
  let api: string;
  let kafka: Kafka;
  let producer: Producer;
  let reader: Consumer;
  const statuses: RunStatusChanged[] = [];
  const runsRequested: RunRequested[] = [];
  const deadLetters: { reason: string | undefined; originalTopic: string | undefined }[] = [];

  beforeAll(async () => {
    const secretFile = join(stateDir, 'tenant-a.secret');
    writeFileSync(secretFile, `${SECRET_A.toString()}\n`);
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({
        api: { port: apiPort },
        simulator: { port: simPort },
        kafka: { partitions: { requests: 2 } },
        ingress: { backoff: { baseMs: 50, capMs: 1_000 } },
        tenants: {
          'tenant-a': { ingress: { secretFile }, admission: { bucket: { capacity: CAPACITY, refillPerSec: REFILL_PER_SEC } } },
          'tenant-c': { ingress: { secretEnv: 'TEST_INGRESS_SECRET_C' } },
          // One token, practically never refilled: a second request could only be offered again past its deadline.
          'tenant-d': { apiKeySha256: TENANT_D_KEY_SHA256, ingress: { secretEnv: 'TEST_INGRESS_SECRET_D' }, admission: { bucket: { capacity: 1, refillPerSec: 0.001 } } },
        },
      }),
      roles: 'provider-sim,status-sink,dlq-sink,processor,ingress,api',
      namespace,
      env: { SLUICE_STATE_DIR: stateDir, TEST_INGRESS_SECRET_C: SECRET_C.toString(), TEST_INGRESS_SECRET_D: SECRET_D.toString() },
    });
    api = `http://127.0.0.1:${apiPort}`;
    kafka = new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING });
    producer = kafka.producer();
    await producer.connect();
    reader = kafka.consumer({ groupId: `${namespace}test-reader`, maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topics: [topics.status, topics.interactive, topics.batch, topics.dlq], fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, message }) => {
        if (topic === topics.status) statuses.push(await codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged));
        else if (topic === topics.dlq) deadLetters.push({ reason: headerText(message.headers, DLQ_HEADER.reason), originalTopic: headerText(message.headers, DLQ_HEADER.originalTopic) });
        else runsRequested.push(await codec.decode<RunRequested>(message.value, SUBJECTS.runRequested));
      },
    });
  }, 120_000);

  afterAll(async () => {
    await reader?.disconnect();
    await producer?.disconnect();
    expect(await sluice?.stop()).toBe(0);
  });

  const submission = (over: Partial<RunSubmission> = {}): RunSubmission => runSubmission({ deadlineMs: DEADLINE_MS, ...over });

  /** Signed with `secret`, else the key's tenant's secret. */
  const record = (sub: RunSubmission, opts: { key?: string; secret?: Buffer } = {}) => {
    const key = opts.key ?? sub.tenantId;
    return signedRecord(codec, sub, opts.secret ?? ({ 'tenant-c': SECRET_C, 'tenant-d': SECRET_D }[key] ?? SECRET_A), key);
  };

  const send = async (records: { key: string; value: Buffer; headers: Record<string, string> }[]) => producer.send({ topic: topics.requests, acks: -1, messages: records });
  const byRequest = (sub: RunSubmission) => statuses.filter(isAnswerTo(sub));
  const requestedOf = (runId: string) => runsRequested.filter((r) => r.runId === runId);

  it('admits a burst of three buckets: exactly the bucket at once, the rest deferred and admitted as tokens refill, each once, none past its deadline', async () => {
    const burst = Array.from({ length: 3 * CAPACITY }, () => submission());
    await send(await Promise.all(burst.map((s) => record(s))));

    // Every request's first answer.
    const first = await eventually(async () => {
      const firsts = burst.map((s) => byRequest(s).find((e) => e.sequence === 0));
      return firsts.every((e) => e !== undefined) ? (firsts as RunStatusChanged[]) : undefined;
    }, 20_000, 'every request answered');
    // The bucket refills one token per REFILL_INTERVAL_MS: decided within less than that, the burst
    // met the bucket with no token refilled, so exactly the bucket is admitted at once.
    const decidedAt = first.map((e) => e.occurredAt);
    expect(Math.max(...decidedAt) - Math.min(...decidedAt), 'the burst decided before the first refill').toBeLessThan(REFILL_INTERVAL_MS);
    expect(first.filter((e) => e.status === 'queued')).toHaveLength(CAPACITY);
    const deferred = first.filter((e) => e.status === 'deferred');
    expect(deferred).toHaveLength(2 * CAPACITY);
    for (const e of deferred) expect(e).toMatchObject({ error: { code: 'rate_limited' }, retryAfterSec: expect.any(Number) });

    // Deferred ones are offered again and admitted under the same run id as the bucket refills.
    const queued = await eventually(async () => {
      const q = burst.map((s) => byRequest(s).find((e) => e.status === 'queued'));
      return q.every((e) => e !== undefined) ? (q as RunStatusChanged[]) : undefined;
    }, 60_000, 'every request queued');
    for (const [i, e] of queued.entries()) expect(e.runId).toBe(first[i]!.runId);
    for (const e of queued) expect(e.occurredAt).toBeLessThan(e.deadline);
    // Never faster than the bucket allows: the k-th admission (from 1) after the first needs
    // k − CAPACITY tokens refilled (clock slack: the bucket reads Redis's clock, statuses the ingress's).
    const admittedAt = queued.map((e) => e.occurredAt).sort((a, b) => a - b);
    for (const [k, at] of admittedAt.entries()) {
      expect(at - admittedAt[0]!, `admission ${k + 1}`).toBeGreaterThanOrEqual((k + 1 - CAPACITY) * REFILL_INTERVAL_MS - CLOCK_SLACK_MS);
    }

    for (const e of queued) {
      const done = await waitForStatus(api, e.runId, TENANT_A_KEY, ['completed', 'failed', 'expired', 'rejected'], 30_000);
      expect(done.status).toBe('completed');
      expect(Date.parse(done.finishedAt)).toBeLessThanOrEqual(Date.parse(done.deadline));
      expect(requestedOf(e.runId)).toHaveLength(1);
    }
    expect(new Set(queued.map((e) => e.runId)).size).toBe(3 * CAPACITY);
  }, 120_000);

  it('answers a duplicate key with the first outcome again, never a second run', async () => {
    const original = submission({ tenantId: 'tenant-c' });
    const resend = { ...original, requestId: randomUUID() };
    await send([await record(original)]);
    const queued = await eventually(async () => byRequest(original).find((e) => e.status === 'queued'), 20_000, 'the original queued');
    await send([await record(resend)]);
    const replayed = await eventually(async () => byRequest(resend)[0], 20_000, 'the duplicate answered');
    expect(replayed).toMatchObject({ runId: queued.runId, status: 'queued', sequence: queued.sequence });
    const done = await waitForStatus(api, queued.runId, TENANT_C_KEY, ['completed', 'failed', 'expired'], 20_000);
    expect(done.status).toBe('completed');
    expect(requestedOf(queued.runId)).toHaveLength(1);
    expect(runsRequested.filter((r) => r.tenantId === 'tenant-c')).toHaveLength(1);
  }, 60_000);

  it('rejects with deadline_unreachable a request that could only be offered again past its deadline, and GET answers for it', async () => {
    const first = submission({ tenantId: 'tenant-d' });
    const second = submission({ tenantId: 'tenant-d' });
    await send([await record(first), await record(second)]);
    expect(await eventually(async () => byRequest(first)[0], 20_000, 'the first answered')).toMatchObject({ status: 'queued' });
    const rejected = await eventually(async () => byRequest(second)[0], 20_000, 'the second answered');
    expect(rejected).toMatchObject({ status: 'rejected', sequence: 0, error: { code: 'deadline_unreachable' } });
    const read = await waitForStatus(api, rejected.runId, TENANT_D_KEY, ['rejected'], 20_000);
    expect(read).toMatchObject({ status: 'rejected', error: { code: 'deadline_unreachable' } });
    expect(requestedOf(rejected.runId)).toEqual([]);
  }, 60_000);

  it('dead-letters a forged signature, a tenant without an ingress secret and a mis-addressed tenant, and runs none of them', async () => {
    const forged = submission();
    const unauthorized = submission({ tenantId: 'tenant-b' });
    const misaddressed = submission({ tenantId: 'tenant-c' });
    const unsigned = submission();
    const unsignedRecord = await record(unsigned);
    await send([
      await record(forged, { secret: randomBytes(32) }),
      await record(unauthorized, { secret: randomBytes(32) }),
      // Signed with tenant-a's secret under tenant-a's key, but asking for tenant-c.
      await record(misaddressed, { key: 'tenant-a' }),
      { ...unsignedRecord, headers: {} },
    ]);
    const reasons = await eventually(async () => (deadLetters.length >= 4 ? deadLetters.map((d) => d.reason).sort() : undefined), 20_000, 'four dead letters');
    expect(reasons).toEqual(['invalid_request', 'unauthenticated', 'unauthenticated', 'unknown_tenant']);
    for (const d of deadLetters) expect(d.originalTopic).toBe(topics.requests);
    // Given the other records time to pass, nothing of these ran or was answered.
    await new Promise((r) => setTimeout(r, 1_000));
    for (const s of [forged, unauthorized, misaddressed, unsigned]) {
      expect(byRequest(s)).toEqual([]);
      expect(runsRequested.filter((r) => r.idempotencyKey === s.idempotencyKey)).toEqual([]);
    }
  }, 60_000);

  it('archives an unsigned record that decodes as another tenant’s run as bytes: no status, no run, and a replay only gives its bytes back to the ingress', async () => {
    // The victim: tenant-c's run, finished and readable.
    const victim = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_C_KEY, json: { workflow: 'support-reply', input: { message: 'hi', orderId: '1' } } });
    expect(victim.status).toBe(202);
    const victimId = (victim.body as { runId: string }).runId;
    const before = await waitForStatus(api, victimId, TENANT_C_KEY, ['completed', 'failed'], 30_000);
    // An attacker with write access to the ingress topic, keyed by a tenant it may write as, with no
    // signature: its value is a Confluent-framed RunRequested naming tenant-c's run and a run of
    // tenant-b's that never existed.
    const invented = randomUUID();
    const forgedRuns: RunRequested[] = [
      { ...batchRunNow(), runId: victimId, tenantId: 'tenant-c', attempt: 40 },
      { ...batchRunNow(), runId: invented, tenantId: 'tenant-b' },
    ];
    const forgedRecords = await Promise.all(forgedRuns.map(async (run) => ({ key: 'tenant-a', value: await codec.encode(SUBJECTS.runRequested, run), headers: {} })));
    await send(forgedRecords);
    const db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 1 });
    try {
      const rows = await eventually(
        async () => {
          const { rows: found } = await db.query<{ id: string; reason: string; run_id: string | null; tenant_id: string | null; payload_json: unknown }>(
            'SELECT id::text, reason, run_id::text, tenant_id, payload_json FROM dead_letter_events WHERE namespace = $1 AND payload = ANY($2::bytea[])',
            [namespace, forgedRecords.map((r) => r.value)],
          );
          return found.length === forgedRecords.length ? found : undefined;
        },
        20_000,
        'the forged records archived',
      );
      expect(rows.map((r) => [r.run_id, r.tenant_id])).toEqual([
        [null, null],
        [null, null],
      ]);
      for (const row of rows) expect(row.payload_json).toBeNull();
      // Time for a status the sink might have published to reach Postgres.
      await new Promise((r) => setTimeout(r, 2_000));
      expect(statuses.filter((s) => s.runId === invented || (s.runId === victimId && s.status === 'dead_lettered'))).toEqual([]);
      expect((await http(`${api}/v1/runs/${invented}`, { key: TENANT_B_KEY })).status).toBe(404);
      const after = await http(`${api}/v1/runs/${victimId}`, { key: TENANT_C_KEY });
      expect(after.body).toMatchObject({ status: before.status });
      // A replay can only give the producer's bytes back to the ingress, which checks them again.
      const replay = await runCli(['dlq', 'replay', ...rows.map((r) => r.id), '--dry-run'], namespace, { SLUICE_STATE_DIR: stateDir });
      expect(replay.code).toBe(0);
      for (const row of rows) {
        const line = replay.stdout.split('\n').find((l) => l.startsWith(`would replay #${row.id}:`));
        expect(line).toMatch(new RegExp(`: the original \\d+ bytes -> ${topics.requests.replaceAll('.', '\\.')}, unchanged$`));
      }
    } finally {
      await db.end();
    }
  }, 90_000);
});
