/**
 * `npm run bench footprint`: what one run costs the infrastructure, end to end (API → processor →
 * status sink, one Sluice process with the simulator). Redis is a redis-server of the bench's own
 * and Postgres a database of its own, so the deltas are Sluice's alone; Kafka topics are a fresh
 * namespace on the shared broker.
 */
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { Kafka } from 'kafkajs';
import pg from 'pg';
import { parseConfig } from '../../config/load.js';
import { migrate } from '../../db/migrate.js';
import { createKafka } from '../../kafka/client.js';
import { groupId, topicNames } from '../../kafka/topics.js';
import { createLogger } from '../../obs/logger.js';
import { SCRIPTS, scriptSource, type ScriptName } from '../../redis/scripts.js';
import { TERMINAL_STATUSES } from '../../status/run-history.js';
import { freePort } from '../../util/free-port.js';
import { ensureExecutable } from '../infra/apt.js';
import { databaseName, maintenanceUrl, quoteIdent } from '../infra/postgres.js';
import { terminate, waitFor } from '../infra/process.js';
import { spawnEphemeralRedis } from '../infra/redis.js';
import { waitForHttp } from './admission-bench.js';
import { DEMO_TENANT_KEYS, childEnv, withBenchHarness, writeYaml } from './bench-harness.js';
import { BENCH_WORKFLOW, stackConfigDoc } from './sizing-stack.js';
import { counterDelta, endOffsetsByTopic, firstKey, infoField, lessIdle, parseCommandStats, slotGroup } from './sizing-figures.js';

export interface FootprintOptions {
  runs: number;
  json: boolean;
}

const TENANT_KEYS = Object.values(DEMO_TENANT_KEYS);
const WARMUP_RUNS = 5;
/** Runs watched with MONITOR (which costs Redis CPU and output bytes, so it has a window of its own). */
const MONITORED_RUNS = 100;
/**
 * Idle window before the measurement: Redis's idle traffic (breaker polls, lease renewals) is
 * measured over it and subtracted, and it outlasts Postgres 15's 10 s idle flush of a backend's
 * pending table statistics, so the warm-up's rows are counted before the window, not in it.
 */
const IDLE_MS = 11_000;
const SUBMIT_CONCURRENCY = 16;
const DONE_TIMEOUT_MS = 120_000;
const SHARED_REDIS_PORT = 6379;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A redis-server of the bench's own on a free loopback port, persistence off; stopped by pid. */
async function ownRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
  const { path } = await ensureExecutable('redis-server', 'redis-server', 'run the footprint bench where redis-server is installed', createLogger('warn'));
  const port = await freePort();
  if (port === SHARED_REDIS_PORT) throw new Error('refusing to start a bench Redis on the shared port 6379');
  const child = await spawnEphemeralRedis(path, port);
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  const url = `redis://127.0.0.1:${port}`;
  const stop = async () => {
    process.off('exit', kill);
    if (child.pid !== undefined && child.exitCode === null) await terminate(child.pid, 5_000);
  };
  return { url, stop };
}

interface RedisSnapshot {
  commands: Map<string, number>;
  inBytes: number;
  outBytes: number;
  /** used_cpu_user + used_cpu_sys of the server, seconds. */
  cpuSec: number;
  /** Bytes of this INFO reply: sent after the counters were read, so counted in the next snapshot's delta. */
  replyBytes: number;
}

async function redisSnapshot(redis: Redis): Promise<RedisSnapshot> {
  const info = (await redis.call('INFO', 'stats', 'cpu', 'commandstats')) as string;
  return {
    commands: parseCommandStats(info),
    inBytes: infoField(info, 'total_net_input_bytes'),
    outBytes: infoField(info, 'total_net_output_bytes'),
    cpuSec: infoField(info, 'used_cpu_user') + infoField(info, 'used_cpu_sys'),
    replyBytes: Buffer.byteLength(info),
  };
}

/** What Redis did between two snapshots, the bench's own INFO call left out. */
function redisDelta(a: RedisSnapshot, b: RedisSnapshot) {
  const commands = counterDelta(a.commands, b.commands).filter(([c]) => c !== 'info');
  // The request of the second INFO is about 40 bytes in; the first's reply is out.
  return { commands, inBytes: b.inBytes - a.inBytes - 40, outBytes: b.outBytes - a.outBytes - a.replyBytes, cpuSec: b.cpuSec - a.cpuSec };
}

async function tableRows(pool: pg.Pool): Promise<{ inserted: Map<string, number>; updated: Map<string, number> }> {
  const client = await pool.connect();
  try {
    // Statistics are read from a snapshot taken once per transaction: start afresh.
    await client.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await client.query<{ relname: string; ins: string; upd: string }>('SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd FROM pg_stat_user_tables');
    return { inserted: new Map(rows.map((r) => [r.relname, Number(r.ins)])), updated: new Map(rows.map((r) => [r.relname, Number(r.upd)])) };
  } finally {
    client.release();
  }
}

type TopicOffsets = Record<string, { partition: number; high: string }[]>;

/** Every partition's end offset, per topic. */
async function topicOffsets(kafka: Kafka, topics: string[]): Promise<TopicOffsets> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return Object.fromEntries(await Promise.all(topics.map(async (t) => [t, await admin.fetchTopicOffsets(t)] as const)));
  } finally {
    await admin.disconnect();
  }
}

/**
 * Bytes of the records each topic got past `from` (per partition): keys, values and header keys
 * and values as produced, without Kafka's batch and record framing.
 */
async function recordBytes(kafka: Kafka, namespace: string, topics: string[], from: TopicOffsets, to: TopicOffsets): Promise<Map<string, number>> {
  const bytes = new Map(topics.map((t) => [t, 0]));
  const start = new Map(Object.entries(from).flatMap(([t, ps]) => ps.map((p) => [`${t}:${p.partition}`, Number(p.high)] as const)));
  // Fresh topics: every partition starts at offset 0, so the end offsets sum to the records to read.
  const remaining = endOffsetsByTopic(to);
  const consumer = kafka.consumer({ groupId: `${namespace}bench.footprint-bytes`, maxWaitTimeInMs: 100, allowAutoTopicCreation: false });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics, fromBeginning: true });
    let done: () => void = () => undefined;
    const finished = new Promise<void>((r) => (done = r));
    const allRead = () => [...remaining.values()].every((n) => n <= 0);
    await consumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        remaining.set(topic, remaining.get(topic)! - 1);
        if (Number(message.offset) >= (start.get(`${topic}:${partition}`) ?? 0)) {
          let n = (message.key?.length ?? 0) + (message.value?.length ?? 0);
          for (const [k, v] of Object.entries(message.headers ?? {})) n += Buffer.byteLength(k) + (Array.isArray(v) ? v : [v]).reduce((s, x) => s + (x ? Buffer.byteLength(x) : 0), 0);
          bytes.set(topic, bytes.get(topic)! + n);
        }
        if (allRead()) done();
      },
    });
    if (!allRead()) await Promise.race([finished, sleep(60_000).then(() => Promise.reject(new Error('reading the topics back took over 60 s')))]);
  } finally {
    await consumer.disconnect();
  }
  return bytes;
}

/** What MONITOR saw clients send (commands scripts run inside Redis left out). */
interface RoundTrips {
  runs: number;
  byCommand: [string, number][];
  byScript: [string, number][];
  bySlotGroup: [string, number][];
}

/** Counts the commands clients send while `work` runs, by command, by Lua script and by slot group. */
async function watchRoundTrips(redisUrl: string, namespace: string, runs: number, work: () => Promise<void>): Promise<RoundTrips> {
  const scriptBySha = new Map((Object.keys(SCRIPTS) as ScriptName[]).map((name) => [createHash('sha1').update(scriptSource(name)).digest('hex'), name]));
  const byCommand = new Map<string, number>();
  const byScript = new Map<string, number>();
  const bySlot = new Map<string, number>();
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  const client = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const monitor = await client.monitor();
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === 'lua') return;
    const cmd = args[0]!.toLowerCase();
    bump(byCommand, cmd);
    if (cmd === 'evalsha') bump(byScript, scriptBySha.get(args[1]!.toLowerCase()) ?? `unknown ${args[1]}`);
    const key = firstKey(args);
    bump(bySlot, key === undefined ? '(no key)' : slotGroup(key, namespace));
  });
  try {
    await work();
  } finally {
    monitor.disconnect();
    client.disconnect();
  }
  const empty = new Map<string, number>();
  return { runs, byCommand: counterDelta(empty, byCommand), byScript: counterDelta(empty, byScript), bySlotGroup: counterDelta(empty, bySlot) };
}

export interface FootprintResult {
  runs: number;
  windowSec: number;
  redis: { commands: [string, number][]; totalCommands: number; inBytes: number; outBytes: number; cpuSec: number; idleCommandsPerSec: number };
  roundTrips: RoundTrips;
  kafka: { topic: string; records: number; bytes: number }[];
  postgres: { table: string; inserted: number; updated: number }[];
  outcomes: Record<string, number>;
}

/** A bare POST, not SluiceClient: the client always sends an Idempotency-Key, whose Redis commands the figures (docs/sizing.md) leave out. */
async function submit(apiUrl: string, i: number): Promise<void> {
  const res = await fetch(`${apiUrl}/v1/runs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TENANT_KEYS[i % TENANT_KEYS.length]}`, 'content-type': 'application/json' },
    body: JSON.stringify({ workflow: BENCH_WORKFLOW, input: { message: 'Where is order 42?', orderId: String(i) } }),
    signal: AbortSignal.timeout(15_000),
  });
  if (res.status !== 202) throw new Error(`POST /v1/runs: HTTP ${res.status} ${await res.text()}`);
}

async function submitAll(apiUrl: string, n: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(SUBMIT_CONCURRENCY, n) }, async () => {
      while (next < n) await submit(apiUrl, next++);
    }),
  );
}

async function waitFinished(pool: pg.Pool, n: number): Promise<void> {
  const ok = await waitFor(DONE_TIMEOUT_MS, 200, async () => {
    const { rows } = await pool.query<{ n: string }>('SELECT count(*) AS n FROM runs WHERE status = ANY($1)', [[...TERMINAL_STATUSES]]);
    return Number(rows[0]!.n) >= n ? true : undefined;
  });
  if (!ok) throw new Error(`fewer than ${n} runs finished within ${DONE_TIMEOUT_MS} ms`);
}

export async function runFootprint(opts: FootprintOptions): Promise<FootprintResult> {
  return withBenchHarness('footprint', async ({ infra, children, dir, logger }) => {
    const ownR = await ownRedis();
    const dbUrl = new URL(infra.databaseUrl);
    const dbName = `sluice_footprint_${Date.now().toString(36)}`;
    dbUrl.pathname = `/${dbName}`;
    const maintenance = new pg.Client({ connectionString: maintenanceUrl(infra.databaseUrl) });
    await maintenance.connect();
    await maintenance.query(`CREATE DATABASE ${quoteIdent(dbName)}`);
    const pool = new pg.Pool({ connectionString: dbUrl.toString(), max: 2 });
    const redis = new Redis(ownR.url, { maxRetriesPerRequest: 1 });
    const namespace = `bench-footprint-${Date.now().toString(36)}.`;
    let sluice: ChildProcess | undefined;
    let kafka: Kafka | undefined;
    try {
      if (databaseName(dbUrl.toString()) !== dbName) throw new Error('the bench database URL does not name its own database');
      await migrate(pool);
      const [apiPort, simPort] = [await freePort(), await freePort()];
      const simulatorUrl = `http://127.0.0.1:${simPort}`;
      const doc = stackConfigDoc({ opsPort: 0, registryDir: join(dir, 'schema-registry'), simulatorUrl, maxInFlight: 64, llmCap: 64, otherCaps: 1_000 });
      doc.api = { ...doc.api, host: '127.0.0.1', port: apiPort };
      doc.simulator = { ...doc.simulator, host: '127.0.0.1', port: simPort };
      const path = writeYaml(dir, 'sluice.yaml', doc);
      const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: ownR.url, DATABASE_URL: dbUrl.toString(), SLUICE_NAMESPACE: namespace };
      kafka = createKafka(parseConfig(doc, env, path).kafka, logger, `bench-footprint-${process.pid}`);
      sluice = children.start('cli/main.js', ['start', '--config', path, '--roles', 'provider-sim,api,processor,status-sink'], childEnv(env));
      const died = children.exited(sluice, 'sluice');
      const apiUrl = `http://127.0.0.1:${apiPort}`;
      await Promise.race([waitForHttp(`${apiUrl}/healthz`, 90_000), died]);

      // Warm-up: scripts loaded, consumers joined, connections open.
      await Promise.race([submitAll(apiUrl, WARMUP_RUNS).then(() => waitFinished(pool, WARMUP_RUNS)), died]);
      const monitored = Math.min(MONITORED_RUNS, opts.runs);
      const roundTrips = await watchRoundTrips(ownR.url, namespace, monitored, () =>
        Promise.race([submitAll(apiUrl, monitored).then(() => waitFinished(pool, WARMUP_RUNS + monitored)), died]),
      );
      const before = WARMUP_RUNS + monitored;
      const topics = Object.values(topicNames(namespace));
      const idle0 = await redisSnapshot(redis);
      await sleep(IDLE_MS);
      const idle1 = await redisSnapshot(redis);
      const idle = redisDelta(idle0, idle1);
      const idleSec = IDLE_MS / 1000;
      const idlePerSec = new Map(idle.commands.map(([c, n]) => [c, n / idleSec]));

      const pg0 = await tableRows(pool);
      const k0 = await topicOffsets(kafka, topics);
      const r0 = await redisSnapshot(redis);
      const t0 = Date.now();
      await Promise.race([submitAll(apiUrl, opts.runs).then(() => waitFinished(pool, before + opts.runs)), died]);
      const r1 = await redisSnapshot(redis);
      const windowSec = (Date.now() - t0) / 1000;
      const k1 = await topicOffsets(kafka, topics);
      const measured = redisDelta(r0, r1);
      const commands = lessIdle(measured.commands, idlePerSec, windowSec);
      const scaleIdle = windowSec / idleSec;

      // A backend's pending table statistics are flushed when it exits: stop Sluice, then read.
      await children.stop(sluice, 10_000);
      const { rows: outcomeRows } = await pool.query<{ status: string; n: string }>('SELECT status, count(*) AS n FROM runs GROUP BY status');
      const pg1 = await tableRows(pool);
      const ins = new Map(counterDelta(pg0.inserted, pg1.inserted));
      const upd = new Map(counterDelta(pg0.updated, pg1.updated));
      const tables = [...new Set([...ins.keys(), ...upd.keys()])].sort();
      const kafkaRecords = new Map(counterDelta(endOffsetsByTopic(k0), endOffsetsByTopic(k1)));
      const bytes = await recordBytes(kafka, namespace, topics, k0, k1);
      return {
        runs: opts.runs,
        windowSec,
        redis: {
          commands,
          totalCommands: commands.reduce((s, [, n]) => s + n, 0),
          inBytes: Math.max(0, measured.inBytes - idle.inBytes * scaleIdle),
          outBytes: Math.max(0, measured.outBytes - idle.outBytes * scaleIdle),
          cpuSec: Math.max(0, measured.cpuSec - idle.cpuSec * scaleIdle),
          idleCommandsPerSec: idle.commands.reduce((s, [, n]) => s + n, 0) / idleSec,
        },
        kafka: topics.map((t) => ({ topic: t.slice(namespace.length), records: kafkaRecords.get(t) ?? 0, bytes: bytes.get(t) ?? 0 })),
        postgres: tables.map((t) => ({ table: t, inserted: ins.get(t) ?? 0, updated: upd.get(t) ?? 0 })),
        roundTrips,
        outcomes: Object.fromEntries(outcomeRows.map((r) => [r.status, Number(r.n)])),
      };
    } finally {
      if (sluice) await children.stop(sluice, 10_000);
      redis.disconnect();
      await pool.end().catch(() => undefined);
      if (kafka) {
        const admin = kafka.admin();
        await admin.connect().catch(() => undefined);
        await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
        await admin.deleteGroups([groupId(namespace, 'processor'), groupId(namespace, 'status-sink'), `${namespace}bench.footprint-bytes`]).catch(() => undefined);
        await admin.disconnect().catch(() => undefined);
      }
      await maintenance.query(`DROP DATABASE IF EXISTS ${quoteIdent(dbName)} WITH (FORCE)`).catch(() => undefined);
      await maintenance.end().catch(() => undefined);
      await ownR.stop();
    }
  });
}

const per = (n: number, runs: number, digits = 2) => (n / runs).toFixed(digits);

export function footprintTable(r: FootprintResult): string {
  const lines = [
    `footprint bench: ${r.runs} runs of ${BENCH_WORKFLOW} end to end (POST /v1/runs → processor → status sink), measured over ${r.windowSec.toFixed(1)} s after ${WARMUP_RUNS} warm-up runs`,
    `Redis: a redis-server of the bench's own; INFO commandstats and total_net_*_bytes deltas, its idle traffic (${r.redis.idleCommandsPerSec.toFixed(1)} commands/s, measured over ${IDLE_MS / 1000} s just before) subtracted; commandstats also counts the commands scripts run inside EVALSHA`,
    'Kafka: end-offset deltas summed over partitions per topic; bytes = keys + values + headers as produced (no batch or record framing; __consumer_offsets commits not counted: the broker is shared)',
    'Postgres: pg_stat_user_tables n_tup_ins / n_tup_upd deltas in a database of the bench\'s own, read after Sluice stopped (its backends flush their statistics on exit)',
    '',
    '| per run | value |',
    '|---|---|',
    `| Redis commands (all) | ${per(r.redis.totalCommands, r.runs)} |`,
    ...r.redis.commands.map(([c, n]) => `| Redis ${c} | ${per(n, r.runs)} |`),
    `| Redis bytes in (client → server) | ${per(r.redis.inBytes, r.runs, 0)} |`,
    `| Redis bytes out (server → client) | ${per(r.redis.outBytes, r.runs, 0)} |`,
    `| Redis server CPU (used_cpu_user + used_cpu_sys), µs | ${per(r.redis.cpuSec * 1e6, r.runs, 0)} |`,
    ...r.kafka.filter((k) => k.records > 0).map((k) => `| Kafka ${k.topic}: records / bytes | ${per(k.records, r.runs)} / ${per(k.bytes, r.runs, 0)} |`),
    `| Kafka all topics: records / bytes | ${per(r.kafka.reduce((s, k) => s + k.records, 0), r.runs)} / ${per(r.kafka.reduce((s, k) => s + k.bytes, 0), r.runs, 0)} |`,
    ...r.postgres.map((p) => `| Postgres ${p.table}: rows inserted / updated | ${per(p.inserted, r.runs)} / ${per(p.updated, r.runs)} |`),
    '',
    `Redis round trips per run, from MONITOR over ${r.roundTrips.runs} other runs (what clients send; commands inside scripts left out):`,
    '',
    '| per run | round trips |',
    '|---|---|',
    `| all | ${per(r.roundTrips.byCommand.reduce((s, [, n]) => s + n, 0), r.roundTrips.runs)} |`,
    ...r.roundTrips.byCommand.map(([c, n]) => `| ${c} | ${per(n, r.roundTrips.runs)} |`),
    ...r.roundTrips.byScript.map(([c, n]) => `| evalsha ${c} | ${per(n, r.roundTrips.runs)} |`),
    ...r.roundTrips.bySlotGroup.map(([g, n]) => `| slot group ${g} | ${per(n, r.roundTrips.runs)} |`),
    '',
    `outcomes (warm-up and monitored runs included): ${Object.entries(r.outcomes).map(([s, n]) => `${s} ${n}`).join(', ')}`,
  ];
  return `${lines.join('\n')}\n`;
}

export async function benchFootprint(opts: FootprintOptions): Promise<void> {
  const r = await runFootprint(opts);
  process.stdout.write(opts.json ? `${JSON.stringify(r, null, 2)}\n` : footprintTable(r));
}
