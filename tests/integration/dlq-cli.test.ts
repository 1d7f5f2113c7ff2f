import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Consumer, type KafkaMessage } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { migrate } from '../../src/db/migrate.js';
import { DeadLetterStore, type ArchivedDeadLetter } from '../../src/dlq/dead-letter-store.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunRequested } from '../../src/events/schemas.js';
import { ensureTopics, topicNames } from '../../src/kafka/topics.js';
import { packageRoot } from '../../src/util/package-root.js';
import { eventually, testNamespace, writeTestConfig } from './harness.js';

const cli = join(packageRoot(), 'dist', 'cli', 'main.js');
const namespace = testNamespace('dlq-cli');
const topics = topicNames(namespace);
/** The CLI and this file share the state dir, hence the file-backed schema registry in it. */
const stateDir = mkdtempSync(join(tmpdir(), 'sluice-dlq-cli-'));
const codec = new EventCodec(new FileSchemaRegistry(join(stateDir, 'schema-registry')));
/** Its own Postgres schema: the CLI sees only this file's rows, so counts are exact. */
const schema = `dlq_cli_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
const WINDOW_MS = 600_000;

let env: Record<string, string>;
let admin: pg.Pool;
let pool: pg.Pool;
let store: DeadLetterStore;
let kafka: Kafka;
let consumer: Consumer;
/** Everything produced to the two work topics since the file started. */
const produced: { topic: string; message: KafkaMessage }[] = [];

interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** `sluice dlq ...` as a user runs it, in its own process. */
function dlq(...args: string[]): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, 'dlq', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('error', reject);
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

function run(over: Partial<RunRequested> = {}): RunRequested {
  const admittedAt = Date.now() - 3_600_000;
  return {
    runId: randomUUID(),
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    class: 'batch',
    admittedAt,
    deadline: admittedAt + WINDOW_MS,
    attempt: 2,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    input: '{"question":"where is my order?"}',
    idempotencyKey: null,
    dueAt: admittedAt + 5_000,
    ...over,
  };
}

let offset = 0;
async function seed(kind: { run: RunRequested } | { poison: Buffer; key: string; topic?: string }): Promise<string> {
  offset++;
  const isRun = 'run' in kind;
  const row: ArchivedDeadLetter = {
    originalTopic: isRun ? topics.retry : (kind.topic ?? topics.interactive),
    originalPartition: 0,
    originalOffset: String(offset),
    originalKey: Buffer.from(isRun ? kind.run.tenantId : kind.key),
    consumerGroup: `${namespace}sluice.processor`,
    tenantId: isRun ? kind.run.tenantId : null,
    workflow: isRun ? kind.run.workflow : null,
    runId: isRun ? kind.run.runId : null,
    reason: isRun ? 'non_retryable' : 'decode_error',
    payload: isRun ? await codec.encode(SUBJECTS.runRequested, kind.run) : kind.poison,
    payloadJson: isRun ? kind.run : null,
    headers: { 'sluice-dlt-reason': isRun ? 'non_retryable' : 'decode_error' },
    errorClass: isRun ? 'ToolHttpError' : 'EventDecodeError',
    errorMessage: isRun ? 'order-lookup answered 400' : 'first byte is 222, not the magic byte 0',
    errorStack: isRun ? 'ToolHttpError: order-lookup answered 400\n    at runStep (run-executor.ts:300:11)' : null,
    attempts: isRun ? 2 : 1,
    firstFailedAt: Date.now() - 120_000,
    failedAt: Date.now() - 60_000,
  };
  await store.archive([row]);
  const { rows } = await pool.query<{ id: string }>('SELECT id::text AS id FROM dead_letter_events WHERE original_topic = $1 AND original_offset = $2', [row.originalTopic, row.originalOffset]);
  return rows[0]!.id;
}

const replaysOf = (id: string) => produced.filter((p) => p.message.headers?.['sluice-replay-of']?.toString() === id);

beforeAll(async () => {
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
  const infra = inject('infra');
  const url = new URL(infra.databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  env = {
    SLUICE_CONFIG: writeTestConfig(),
    KAFKA_BROKERS: infra.kafkaBrokers.join(','),
    REDIS_URL: infra.redisUrl,
    DATABASE_URL: url.toString(),
    SLUICE_NAMESPACE: namespace,
    SLUICE_STATE_DIR: stateDir,
  };
  admin = new pg.Pool({ connectionString: infra.databaseUrl, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  await migrate(pool);
  store = new DeadLetterStore(pool, { namespace });

  // The app creates its topics at start-up; a replay never does.
  kafka = new Kafka({ clientId: 'dlq-cli-test', brokers: infra.kafkaBrokers, logLevel: logLevel.NOTHING });
  const kafkaAdmin = kafka.admin();
  await kafkaAdmin.connect();
  await ensureTopics(kafkaAdmin, loadConfig({ path: env.SLUICE_CONFIG, env: {} }).kafka, namespace);
  await kafkaAdmin.disconnect();
  consumer = kafka.consumer({ groupId: `${namespace}dlq-cli-test` });
  await consumer.connect();
  await consumer.subscribe({ topics: [topics.interactive, topics.batch], fromBeginning: true });
  await consumer.run({ eachMessage: async ({ topic, message }) => void produced.push({ topic, message }) });
});

afterAll(async () => {
  await consumer?.disconnect();
  await pool?.end();
  await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin?.end();
  rmSync(stateDir, { recursive: true, force: true });
});

describe('sluice dlq, run as an operator would', () => {
  let runRow: string;
  let poisonRow: string;
  let original: RunRequested;

  beforeAll(async () => {
    original = run();
    runRow = await seed({ run: original });
    poisonRow = await seed({ poison: Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]), key: 'tenant-b' });
  });

  it('lists dead letters as an aligned table and as JSON, filtered', async () => {
    const table = await dlq('list');
    expect(table.status).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID\s+FAILED AT\s+TENANT\s+WORKFLOW\s+REASON\s+ERROR\s+ATTEMPTS\s+STATUS\s+RUN ID$/);
    expect(lines).toHaveLength(3);
    // Aligned: every column starts at the same place on every line.
    const statusAt = lines[0]!.indexOf('STATUS');
    for (const line of lines.slice(1)) expect(line.slice(statusAt, statusAt + 'pending'.length)).toBe('pending');
    const runLine = lines.find((l) => l.startsWith(`${runRow} `))!;
    expect(runLine).toContain('tenant-a');
    expect(runLine).toContain('ToolHttpError: order-lookup answered 400');
    expect(runLine).toContain(original.runId);

    const json = await dlq('list', '--json', '--reason', 'decode_error');
    expect(json.status).toBe(0);
    const rows = JSON.parse(json.stdout) as Record<string, unknown>[];
    expect(rows).toEqual([expect.objectContaining({ id: poisonRow, reason: 'decode_error', status: 'pending', tenantId: null, runId: null, attempts: 1 })]);
    expect(JSON.parse((await dlq('list', '--json', '--tenant', 'tenant-a', '--since', '1h')).stdout).map((r: { id: string }) => r.id)).toEqual([runRow]);
  });

  it('shows every field, the decoded payload, headers, error and stack', async () => {
    const r = await dlq('show', runRow);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^id:\\s+${runRow}$`, 'm'));
    expect(r.stdout).toMatch(new RegExp(`^original record:\\s+${topics.retry.replaceAll('.', '\\.')} partition 0 offset \\d+$`, 'm'));
    expect(r.stdout).toMatch(/^error:\n  ToolHttpError: order-lookup answered 400\n      at runStep/m);
    expect(r.stdout).toContain(`"runId": "${original.runId}"`);
    expect(r.stdout).toContain('"workflow": "support-reply"');
    expect(r.stdout).toContain('sluice-dlt-reason: non_retryable');
    expect(r.stdout).toContain('at runStep (run-executor.ts:300:11)');

    const json = JSON.parse((await dlq('show', poisonRow, '--json')).stdout) as { payload: string; originalKey: string; payloadJson: unknown };
    expect(Buffer.from(json.payload, 'base64')).toEqual(Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]));
    expect(Buffer.from(json.originalKey, 'base64').toString()).toBe('tenant-b');
    expect(json.payloadJson).toBeNull();

    const missing = await dlq('show', '987654321');
    expect(missing.status).toBe(3);
    expect(missing.stderr).toContain('no dead letter #987654321');
  });

  it('--dry-run says what would be replayed and changes nothing', async () => {
    const r = await dlq('replay', runRow, poisonRow, '--dry-run');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`would replay #${runRow}: run ${original.runId} (tenant-a/support-reply) -> ${topics.batch} as attempt 3`);
    expect(r.stdout).toContain(`would replay #${poisonRow}: the original 6 bytes -> ${topics.interactive}, unchanged`);
    expect(r.stdout).toContain('dry run, nothing changed: would replay 2, skip 0');
    const filtered = await dlq('replay', '--tenant', 'tenant-a', '--dry-run');
    expect(filtered.status).toBe(0);
    expect(filtered.stdout).toContain(`would replay #${runRow}`);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(produced).toEqual([]);
    expect((await store.get(runRow))?.status).toBe('pending');
  });

  it('replays a run as its next attempt with the same run id and a fresh deadline, once', async () => {
    const before = Date.now();
    const r = await dlq('replay', runRow, '--by', 'alice@ops');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('replayed 1, skipped 0, failed 0');
    // stderr is not a terminal here: a line per row instead of a bar.
    expect(r.stderr).toContain(`replayed #${runRow}: run ${original.runId}`);

    const [event] = await eventually(async () => (replaysOf(runRow).length > 0 ? replaysOf(runRow) : undefined), 20_000, 'the replayed event');
    expect(event!.topic).toBe(topics.batch);
    expect(event!.message.key?.toString()).toBe('tenant-a');
    const replayed = await codec.decode<RunRequested>(event!.message.value, SUBJECTS.runRequested);
    expect(replayed).toMatchObject({ runId: original.runId, tenantId: 'tenant-a', workflow: 'support-reply', class: 'batch', attempt: 3, input: original.input, dueAt: null });
    expect(replayed.admittedAt).toBeGreaterThanOrEqual(before);
    expect(replayed.deadline - replayed.admittedAt).toBe(WINDOW_MS);
    expect(replayed.deadline).toBeGreaterThan(Date.now());

    const row = await store.get(runRow);
    expect(row).toMatchObject({ status: 'replayed', replayedBy: 'alice@ops', replayCount: 1 });

    const again = await dlq('replay', runRow);
    expect(again.status).toBe(3);
    expect(again.stdout).toContain('replayed 0, skipped 1 (1 already replayed), failed 0');
    await new Promise((r) => setTimeout(r, 1_000));
    expect(replaysOf(runRow)).toHaveLength(1);
  });

  it('replays poison as the original bytes and key, to the original topic', async () => {
    const r = await dlq('replay', poisonRow);
    expect(r.status).toBe(0);
    const [event] = await eventually(async () => (replaysOf(poisonRow).length > 0 ? replaysOf(poisonRow) : undefined), 20_000, 'the replayed poison');
    expect(event!.topic).toBe(topics.interactive);
    expect(event!.message.value).toEqual(Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]));
    expect(event!.message.key?.toString()).toBe('tenant-b');
  });

  it('two replays of the same row at once produce one event', async () => {
    const id = await seed({ run: run({ class: 'interactive' }) });
    const results = await Promise.all([dlq('replay', id), dlq('replay', id)]);
    expect(results.map((r) => r.status).sort()).toEqual([0, 3]);
    await eventually(async () => (replaysOf(id).length > 0 ? true : undefined), 20_000, 'the replayed event');
    await new Promise((r) => setTimeout(r, 2_000));
    expect(replaysOf(id)).toHaveLength(1);
    expect(replaysOf(id)[0]!.topic).toBe(topics.interactive);
  });

  it('discards only with a reason, and a discarded row is not replayed', async () => {
    const id = await seed({ run: run() });
    const noReason = await dlq('discard', id);
    expect(noReason.status).toBe(2);
    expect(noReason.stderr).toContain('--reason');

    const done = await dlq('discard', id, '--reason', 'customer withdrew the request', '--by', 'bob@ops');
    expect(done.status).toBe(0);
    expect(done.stdout).toContain(`discarded #${id}`);
    expect(await store.get(id)).toMatchObject({ status: 'discarded', discardedBy: 'bob@ops', discardReason: 'customer withdrew the request' });

    const replay = await dlq('replay', id);
    expect(replay.status).toBe(3);
    expect(replay.stdout).toContain('skipped 1 (1 discarded)');
    expect(replaysOf(id)).toEqual([]);

    const twice = await dlq('discard', id, '987654321', '--reason', 'again');
    expect(twice.status).toBe(3);
    expect(twice.stderr).toContain(`not discarded #${id}: discarded, not pending`);
    expect(twice.stderr).toContain('not discarded #987654321: not found');
  });

  it('refuses bad filters and ids with exit code 2, naming the option', async () => {
    const since = await dlq('list', '--since', 'yesterday');
    expect(since.status).toBe(2);
    expect(since.stderr).toContain("option '--since <when>'");
    const status = await dlq('list', '--status', 'lost');
    expect(status.status).toBe(2);
    expect(status.stderr).toContain("option '--status <status>'");
    const id = await dlq('show', '12abc');
    expect(id.status).toBe(2);
    expect(id.stderr).toContain('"12abc" is not an id');
    const unsafe = await dlq('replay', '--reason', 'decode_error');
    expect(unsafe.status).toBe(2);
    expect(unsafe.stderr).toContain('--yes');
    const order = await dlq('list', '--since', '1h', '--until', '2h');
    expect(order.status).toBe(2);
    expect(order.stderr).toContain('--since');
  });

  it('counts by status, by tenant and reason, and over time', async () => {
    const r = await dlq('stats', '--json', '--bucket', 'day');
    expect(r.status).toBe(0);
    const stats = JSON.parse(r.stdout);
    // Seeded: the first run and the poison (replayed), the raced run (replayed), the discarded run.
    expect(stats.byStatus).toEqual({ pending: 0, replayed: 3, discarded: 1 });
    expect(stats.total).toBe(4);
    expect(stats.byTenantReason).toEqual([
      { tenantId: 'tenant-a', reason: 'non_retryable', total: 3, pending: 0 },
      { tenantId: null, reason: 'decode_error', total: 1, pending: 0 },
    ]);
    expect(stats.overTime.reduce((n: number, b: { total: number }) => n + b.total, 0)).toBe(4);
    const text = await dlq('stats', '--since', '1d');
    expect(text.status).toBe(0);
    expect(text.stdout).toContain('pending 0, replayed 3, discarded 1');
  });

  it('refuses to replay poison into a topic outside this namespace: the row stays pending, nothing is produced there', async () => {
    // A topic that exists, so only the namespace rule stands between the row and it.
    const foreign = `${namespace}payments.ledger`;
    const kafkaAdmin = kafka.admin();
    await kafkaAdmin.connect();
    try {
      await kafkaAdmin.createTopics({ topics: [{ topic: foreign, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
      const hostile = await seed({ poison: Buffer.from('{"amount":-1000000}'), key: 'tenant-b', topic: foreign });
      const fine = await seed({ poison: Buffer.from([0xba, 0xd0]), key: 'tenant-b' });
      const refusal = `its original topic "${foreign}" is not one of this namespace's topics (${Object.values(topics).join(', ')}), the only ones a replay produces into`;

      const dry = await dlq('replay', hostile, fine, '--dry-run');
      expect(dry.status).toBe(3);
      expect(dry.stdout).toContain(`would refuse #${hostile}: ${refusal}`);
      expect(dry.stdout).toContain('dry run, nothing changed: would replay 1, skip 0, refuse 1');

      const r = await dlq('replay', hostile, fine);
      expect(r.status).toBe(3);
      expect(r.stdout).toContain('replayed 1, skipped 0, refused 1, failed 0');
      expect(r.stderr).toContain(`refused #${hostile}: ${refusal}`);
      expect(await store.get(hostile)).toMatchObject({ status: 'pending', replayCount: 0 });
      expect(await store.get(fine)).toMatchObject({ status: 'replayed' });
      await eventually(async () => (replaysOf(fine).length > 0 ? true : undefined), 20_000, 'the replayed poison');
      const [offsets] = await kafkaAdmin.fetchTopicOffsets(foreign);
      expect(offsets!.high).toBe('0');
    } finally {
      await kafkaAdmin.deleteTopics({ topics: [foreign] }).catch(() => undefined);
      await kafkaAdmin.disconnect();
    }
  });
});
