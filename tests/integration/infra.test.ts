import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { infraDown, infraStatus, infraUp, type InfraOptions } from '../../src/dev/infra/local-infra.js';
import { DEFAULT_DATABASE_URL, maintenanceUrl } from '../../src/dev/infra/postgres.js';
import { isAlive, isPortOpen, waitFor } from '../../src/dev/infra/process.js';
import { DEFAULT_REDIS_URL, ensureRedis, redisServerPid, stopRedis } from '../../src/dev/infra/redis.js';
import { createLogger } from '../../src/obs/logger.js';
import { readOwnership } from '../../src/dev/infra/ownership.js';

// Not the default ports, so a developer's own broker on 9092 is neither reused nor disturbed.
const KAFKA_PORT = 19192;
const CONTROLLER_PORT = 19193;
const BROKERS = [`127.0.0.1:${KAFKA_PORT}`];
const TOPIC = 'infra-smoke';
const TEST_DB_URL = `postgres://postgres@127.0.0.1:5432/sluice_infra_test_${process.pid}`;

const logger = createLogger(process.env.SLUICE_LOG_LEVEL ?? 'warn', 'infra-test');
const stateDirs: string[] = [];
let opts: InfraOptions;
let redisWasRunning: boolean;
let postgresWasRunning: boolean;

async function newStateDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-infra-'));
  stateDirs.push(dir);
  return dir;
}

async function sql<T extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** The pid of a process that has exited and been reaped. */
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await new Promise((resolve) => child.on('exit', resolve));
  await waitFor(2_000, 20, async () => ((await isAlive(child.pid!)) ? undefined : true));
  return child.pid!;
}

const postgresAnswers = () => sql(maintenanceUrl(DEFAULT_DATABASE_URL), 'SELECT 1').then(() => true, () => false);

beforeAll(async () => {
  for (const port of [KAFKA_PORT, CONTROLLER_PORT]) {
    if (await isPortOpen(port)) throw new Error(`port ${port} is busy: stop whatever listens there before this test`);
  }
  // An empty env: no KAFKA_BROKERS/REDIS_URL/DATABASE_URL from the shell or a global setup.
  opts = { stateDir: await newStateDir(), logger, kafkaPort: KAFKA_PORT, controllerPort: CONTROLLER_PORT, env: {} };
  redisWasRunning = (await redisServerPid(DEFAULT_REDIS_URL)) !== undefined;
  postgresWasRunning = await postgresAnswers();
});

afterAll(async () => {
  for (const stateDir of stateDirs) await infraDown({ ...opts, stateDir }).catch(() => undefined);
  await sql(maintenanceUrl(TEST_DB_URL), `DROP DATABASE IF EXISTS sluice_infra_test_${process.pid}`).catch(() => undefined);
  await Promise.all(stateDirs.map((d) => rm(d, { recursive: true, force: true })));
});

describe('local infrastructure', () => {
  let brokerPid: number;

  it('starts one broker for concurrent up calls on one state dir', async () => {
    const [a, b] = await Promise.all([infraUp(opts), infraUp(opts)]);
    expect([a.started.kafka, b.started.kafka].sort()).toEqual([false, true]);
    expect(a.kafkaBrokers).toEqual(BROKERS);
    expect(b.kafkaBrokers).toEqual(BROKERS);
    // Stores that already ran are reused, not started.
    expect(a.started.redis || b.started.redis).toBe(!redisWasRunning);
    expect(a.started.postgres || b.started.postgres).toBe(!postgresWasRunning);
    expect(a.redisUrl).toBe(DEFAULT_REDIS_URL);
    expect(a.databaseUrl).toBe(DEFAULT_DATABASE_URL);
  });

  it('serves kafkajs: create a topic, produce idempotently, consume in a group', async () => {
    const kafka = new Kafka({ clientId: 'infra-test', brokers: BROKERS, logLevel: logLevel.WARN });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 2 }], waitForLeaders: true });
    await admin.disconnect();

    const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    await producer.send({ topic: TOPIC, acks: -1, messages: [{ key: 'tenant-a', value: 'hello' }] });
    await producer.disconnect();

    const consumer = kafka.consumer({ groupId: `infra-test-${process.pid}` });
    await consumer.connect();
    await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
    const received = new Promise<string>((resolve) => {
      void consumer.run({ eachMessage: async ({ message }) => resolve(message.value?.toString() ?? '') });
    });
    expect(await received).toBe('hello');
    await consumer.disconnect();
  });

  it('reports the broker as owned, with its pid and ports', async () => {
    const status = await infraStatus(opts);
    expect(status.kafka).toMatchObject({
      running: true,
      owned: true,
      fromEnv: false,
      endpoint: BROKERS[0],
      ports: [KAFKA_PORT, CONTROLLER_PORT],
    });
    expect(status.kafka.pid).toEqual(expect.any(Number));
    brokerPid = status.kafka.pid!;
    expect(status.redis).toMatchObject({ running: true, owned: !redisWasRunning, ports: [6379] });
    expect(status.postgres).toMatchObject({ running: true, owned: !postgresWasRunning, ports: [5432] });
    expect(status.redis.pid).toEqual(expect.any(Number));
    expect(status.postgres.pid).toEqual(expect.any(Number));
  });

  it('reuses the running broker on a second up', async () => {
    const again = await infraUp(opts);
    expect(again.started).toEqual({ kafka: false, redis: false, postgres: false });
    expect((await infraStatus(opts)).kafka.pid).toBe(brokerPid);
  });

  it('uses a broker started from another state dir without owning it, and leaves it running on down', async () => {
    const other = { ...opts, stateDir: await newStateDir(), env: { DATABASE_URL: TEST_DB_URL } };
    const up = await infraUp(other);
    expect(up.started).toEqual({ kafka: false, redis: false, postgres: false });
    expect(up.databaseUrl).toBe(TEST_DB_URL);
    // DATABASE_URL's database is created when missing.
    expect(await sql(TEST_DB_URL, 'SELECT current_database() AS db')).toEqual([{ db: `sluice_infra_test_${process.pid}` }]);

    const status = await infraStatus(other);
    expect(status.kafka).toMatchObject({ running: true, owned: false });
    expect(status.kafka.pid).toBeUndefined();
    expect(status.postgres).toMatchObject({ running: true, owned: false, fromEnv: true });

    expect(await infraDown(other)).toEqual({ stopped: [] });
    expect(await isAlive(brokerPid)).toBe(true);
  });

  it('fails clearly when an endpoint given in the environment does not answer', async () => {
    const base = { ...opts, stateDir: await newStateDir() };
    await expect(infraUp({ ...base, env: { KAFKA_BROKERS: '127.0.0.1:1', DATABASE_URL: TEST_DB_URL } })).rejects.toThrow(
      /KAFKA_BROKERS=127\.0\.0\.1:1/,
    );
    await expect(
      infraUp({ ...base, env: { KAFKA_BROKERS: BROKERS[0], REDIS_URL: 'redis://:pw@127.0.0.1:1', DATABASE_URL: TEST_DB_URL } }),
    ).rejects.toThrow(/Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:1 \(REDIS_URL\)/);
    await expect(
      infraUp({ ...base, env: { KAFKA_BROKERS: BROKERS[0], DATABASE_URL: 'postgres://postgres@127.0.0.1:1/x' } }),
    ).rejects.toThrow(/PostgreSQL at .*127\.0\.0\.1:1.*\(DATABASE_URL\) is not reachable/);
  });

  it('stops only what it started on down', async () => {
    const { stopped } = await infraDown(opts);
    expect(stopped).toContain('kafka');
    expect(stopped.includes('redis')).toBe(!redisWasRunning);
    expect(stopped.includes('postgres')).toBe(!postgresWasRunning);
    expect(await isAlive(brokerPid)).toBe(false);
    expect(await isPortOpen(KAFKA_PORT)).toBe(false);
    expect(await isPortOpen(CONTROLLER_PORT)).toBe(false);
    if (redisWasRunning) expect(await redisServerPid(DEFAULT_REDIS_URL)).not.toBeUndefined();
    if (postgresWasRunning) expect(await postgresAnswers()).toBe(true);
    expect((await infraStatus(opts)).kafka).toMatchObject({ running: false, owned: false });
  });

  it('keeps topics across a restart (storage is formatted once), past a stale pid file and lock', async () => {
    // What a crashed `up` leaves behind: files naming a process that no longer exists.
    const dead = await deadPid();
    await writeFile(join(opts.stateDir, 'kafka', 'broker.pid'), `${dead}\n`);
    await writeFile(join(opts.stateDir, 'infra.lock'), JSON.stringify({ pid: dead, token: 'crashed' }));
    const up = await infraUp(opts);
    expect(up.started.kafka).toBe(true);
    const admin = new Kafka({ clientId: 'infra-test', brokers: BROKERS, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    expect(await admin.listTopics()).toContain(TOPIC);
    await admin.disconnect();
    expect((await infraDown(opts)).stopped).toContain('kafka');
  });
});

describe('a three-broker cluster', () => {
  // Nodes two ports apart from the base ports: 19292/19293, 19294/19295, 19296/19297.
  const BASE = 19292;
  const ports = [0, 1, 2, 3, 4, 5].map((i) => BASE + i);
  const brokers = [0, 2, 4].map((i) => `127.0.0.1:${BASE + i}`);

  it('starts every node, lists them in the state file and status, is reused as last started, and stops entirely on down', async () => {
    for (const port of ports) if (await isPortOpen(port)) throw new Error(`port ${port} is busy: stop whatever listens there before this test`);
    const cluster = { ...opts, stateDir: await newStateDir(), kafkaPort: BASE, controllerPort: BASE + 1 };
    const up = await infraUp({ ...cluster, brokers: 3 });
    expect(up.started.kafka).toBe(true);
    expect(up.kafkaBrokers).toEqual(brokers);

    const record = await readOwnership(cluster.stateDir);
    expect(record.kafka?.nodes.map((n) => [n.nodeId, n.port, n.controllerPort])).toEqual([[1, BASE, BASE + 1], [2, BASE + 2, BASE + 3], [3, BASE + 4, BASE + 5]]);
    const pids = record.kafka!.nodes.map((n) => n.pid);
    const status = await infraStatus(cluster);
    expect(status.kafka).toMatchObject({ running: true, owned: true, endpoint: brokers.join(','), ports });
    expect(status.kafka.nodes?.map((n) => n.pid)).toEqual(pids);

    const admin = new Kafka({ clientId: 'infra-test', brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    expect((await admin.describeCluster()).brokers.map((b) => b.nodeId).sort()).toEqual([1, 2, 3]);
    await admin.disconnect();

    // Without --brokers, `up` keeps the size last started; another size must wait for `down`.
    expect((await infraUp(cluster)).started.kafka).toBe(false);
    await expect(infraUp({ ...cluster, brokers: 1 })).rejects.toThrow(/a 3-broker cluster started from .* runs .*sluice infra down/);

    expect((await infraDown(cluster)).stopped).toContain('kafka');
    for (const pid of pids) expect(await isAlive(pid)).toBe(false);
    const open: number[] = [];
    for (const port of ports) if (await isPortOpen(port)) open.push(port);
    expect(open, 'ports still open after down').toEqual([]);
  }, 120_000);
});

describe('a Redis of our own', () => {
  const url = 'redis://127.0.0.1:16379';

  it('is started when none answers, reused while it runs, and stopped by its owner', async () => {
    if (await isPortOpen(16379)) throw new Error('port 16379 is busy');
    const stateDir = await newStateDir();
    const first = await ensureRedis({ stateDir, url, mayStart: true, logger });
    expect(first.started).toBe(true);
    expect(await redisServerPid(url)).toBe(first.pid);

    expect(await ensureRedis({ stateDir, url, mayStart: true, logger })).toEqual({ started: false, pid: first.pid });
    // Another pid on record (the server was replaced since): not ours to stop.
    expect(await stopRedis(stateDir, first.pid! + 1, logger)).toBe(false);
    expect(await stopRedis(stateDir, first.pid!, logger)).toBe(true);
    expect(await isPortOpen(16379)).toBe(false);
  });
});
