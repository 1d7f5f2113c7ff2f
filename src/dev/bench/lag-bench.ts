import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import type { Admin, Consumer, Kafka } from 'kafkajs';
import { parseConfig } from '../../config/load.js';
import type { SluiceConfig } from '../../config/schema.js';
import { createKafka } from '../../kafka/client.js';
import { consumerGroups, ensureTopics, topicNames, type TopicNames } from '../../kafka/topics.js';
import { MonitorLease, monitorScope } from '../../lag/monitor-lease.js';
import { createLogger } from '../../obs/logger.js';
import { PermitStore } from '../../permits/permit-store.js';
import { redisKeys, type RedisKeys } from '../../redis/keys.js';
import { LuaScripts } from '../../redis/scripts.js';
import { freePort } from '../../util/free-port.js';
import { withTimeout } from '../../util/with-timeout.js';
import { waitForHttp } from './admission-bench.js';
import { deleteKeys } from './bench-redis.js';
import { promSum } from './sizing-figures.js';
import { childEnv, localConfig, scrape, withBenchHarness, writeYaml, type BenchHarness } from './bench-harness.js';
import { perSec, runProcessorPhases, type BenchPhase, type PhaseResult, type ProcessorBenchOptions } from './processor-bench.js';

export interface LagBenchOptions {
  /** Partitions in all over Sluice's five topics, one measurement each. */
  partitions: number[];
  /** Polls measured per scenario. */
  polls: number;
  /** The monitor's poll interval in both parts. */
  intervalMs: number;
  /** Seconds the monitor is measured as a standby. */
  standbySec: number;
  processor: ProcessorBenchOptions;
  /** Pairs of processor phases, without and with a lag monitor, in alternating order. */
  rounds: number;
}

/** How the partitions are spread: mostly the work topics, as a deployment would. */
const TOPIC_SHARES: Record<keyof TopicNames, number> = { interactive: 0.35, batch: 0.35, retry: 0.1, status: 0.05, dlq: 0.05, requests: 0.1 };

/** `total` partitions over the five topics by TOPIC_SHARES, at least one each, summing to `total`. */
export function splitPartitions(total: number): Record<keyof TopicNames, number> {
  const topics = Object.keys(TOPIC_SHARES) as (keyof TopicNames)[];
  const split = Object.fromEntries(topics.map((t) => [t, Math.max(1, Math.floor(total * TOPIC_SHARES[t]))])) as Record<keyof TopicNames, number>;
  split.interactive += total - topics.reduce((n, t) => n + split[t], 0);
  return split;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const CPU = 'sluice_process_process_cpu_seconds_total';
const REQUESTS = 'sluice_lag_monitor_kafka_requests_total';
const POLL_WAIT_MS = 30_000;
const STARTUP_SETTLE_MS = 5_000;
const WITH_MONITOR = '+ lag monitor';

interface CostRow {
  partitions: number;
  scenario: string;
  polls: number;
  requestsPerPoll: number;
  cpuMsPerPoll: number;
  lastPollMs: number;
}

interface Standby {
  partitions: number;
  cpuMsPerSec: number;
  requestsPerSec: number;
}

/** One monitor process, the bench watching its polls through the report it leaves in Redis. */
class MonitorUnderTest {
  private lastAt = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly metricsUrl: string,
    private readonly intervalMs: number,
    private readonly died: Promise<never>,
  ) {}

  async metrics(): Promise<string> {
    const text = await scrape(this.metricsUrl);
    if (text === undefined) throw new Error(`${this.metricsUrl} did not answer`);
    return text;
  }

  /** Resolves when the monitor has published a report newer than the last one seen. */
  async nextPoll(): Promise<void> {
    const until = Date.now() + POLL_WAIT_MS;
    for (;;) {
      const text = await this.redis.get(this.keys.lagReport());
      const at = text === null ? 0 : (JSON.parse(text) as { at: number }).at;
      if (at > this.lastAt) {
        this.lastAt = at;
        return;
      }
      if (Date.now() > until) throw new Error(`no lag report within ${POLL_WAIT_MS} ms`);
      await Promise.race([sleep(20), this.died]);
    }
  }

  /** CPU and Kafka requests over exactly `polls` polls, `between` run after each. */
  async measure(polls: number, between: (poll: number) => Promise<void>): Promise<{ cpuSec: number; requests: number; wallSec: number; lastPollMs: number }> {
    await this.nextPoll();
    const m0 = await this.metrics();
    const t0 = Date.now();
    for (let i = 1; i <= polls; i++) {
      const started = Date.now();
      await between(i);
      // A poll that happened meanwhile would go uncounted.
      if (Date.now() - started > this.intervalMs / 2) throw new Error(`the bench's own step took ${Date.now() - started} ms, over half the poll interval`);
      await this.nextPoll();
    }
    const m1 = await this.metrics();
    return {
      cpuSec: promSum(m1, CPU) - promSum(m0, CPU),
      requests: promSum(m1, REQUESTS) - promSum(m0, REQUESTS),
      wallSec: (Date.now() - t0) / 1000,
      lastPollMs: promSum(m1, 'sluice_lag_monitor_scrape_seconds') * 1000,
    };
  }
}

/**
 * A member in each Sluice group of the namespace that commits every partition's offset on demand,
 * as busy consumers would. It reads nothing (all its partitions stay paused). kafkajs's
 * `admin.setOffsets` would join and leave the group for every call, which takes seconds.
 */
class GroupCommitters {
  private readonly consumers: Consumer[] = [];

  constructor(
    private readonly kafka: Kafka,
    private readonly namespace: string,
    private readonly partitions: Record<keyof TopicNames, number>,
  ) {}

  async start(): Promise<void> {
    for (const g of consumerGroups(this.namespace)) {
      const consumer = this.kafka.consumer({ groupId: g.group, allowAutoTopicCreation: false, maxWaitTimeInMs: 100 });
      this.consumers.push(consumer);
      const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
      await consumer.connect();
      await consumer.subscribe({ topics: g.topics, fromBeginning: false });
      await consumer.run({ autoCommit: false, eachBatch: async () => undefined });
      await withTimeout(joined, 30_000, `joining ${g.group}`);
      consumer.pause(g.topics.map((topic) => ({ topic })));
    }
  }

  /** Every group's committed offset on every partition set to `offset`. */
  async commit(offset: number): Promise<void> {
    const names = topicNames(this.namespace);
    const counts = new Map((Object.keys(names) as (keyof TopicNames)[]).map((k) => [names[k], this.partitions[k]]));
    await Promise.all(
      consumerGroups(this.namespace).map((g, i) =>
        this.consumers[i]!.commitOffsets(g.topics.flatMap((topic) => Array.from({ length: counts.get(topic)! }, (_, partition) => ({ topic, partition, offset: String(offset) })))),
      ),
    );
  }

  async stop(): Promise<void> {
    await Promise.all(this.consumers.map((c) => c.disconnect().catch(() => undefined)));
  }
}

async function produceEverywhere(kafka: Kafka, namespace: string, partitions: Record<keyof TopicNames, number>, records: number): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const names = topicNames(namespace);
    for (const k of Object.keys(names) as (keyof TopicNames)[]) {
      const messages = Array.from({ length: partitions[k] }, (_, partition) => Array.from({ length: records }, (__, i) => ({ partition, value: `bench ${i}` }))).flat();
      await producer.send({ topic: names[k], acks: -1, messages });
    }
  } finally {
    await producer.disconnect();
  }
}

/**
 * The namespace's topics. Creating hundreds of partitions at once on a loaded broker can outlast
 * kafkajs's wait for their leaders; creating is idempotent, so it is tried again.
 */
async function createTopics(admin: Admin, config: SluiceConfig, namespace: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await ensureTopics(admin, config.kafka, namespace);
      return;
    } catch (err) {
      if (attempt === 3) throw err;
      await sleep(2_000);
    }
  }
}

interface Ctx extends Omit<BenchHarness, 'logger'> {
  opts: LagBenchOptions;
  stamp: string;
}

/**
 * One monitor process over `total` partitions: first a standby (the bench holds the lease), then
 * active with every group's offsets standing still (record timestamps cached after the first
 * read) and with every offset moving by one before each poll (a record read per partition per poll).
 */
async function monitorCost(ctx: Ctx, total: number): Promise<{ standby: Standby; rows: CostRow[] }> {
  const { opts, infra, children, redis } = ctx;
  const namespace = `bench-lag-${ctx.stamp}-${total}.`;
  const partitions = splitPartitions(total);
  const opsPort = await freePort();
  const doc = localConfig();
  doc.localInfra = false;
  doc.logLevel = 'warn';
  doc.opsPort = opsPort;
  doc.kafka = { ...doc.kafka, partitions };
  doc.lagMonitor = { intervalMs: opts.intervalMs, windowMs: Math.max(3 * opts.intervalMs, 60_000), leaseMs: 15_000 };
  const configPath = writeYaml(ctx.dir, `lag-${total}.yaml`, doc);
  const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace };
  const config = parseConfig(doc, env, configPath);
  const keys = redisKeys(namespace);
  const kafka = createKafka(config.kafka, createLogger('warn', 'sluice-bench', pino.destination(2)), `bench-lag-${process.pid}`);
  const admin = kafka.admin();
  await admin.connect();
  const lease = new MonitorLease(new PermitStore(new LuaScripts(redis), keys), monitorScope(keys), { ttlMs: 15_000, owner: 'bench' });
  const committers = new GroupCommitters(kafka, namespace, partitions);
  let child: ChildProcess | undefined;
  try {
    await createTopics(admin, config, namespace);
    await produceEverywhere(kafka, namespace, partitions, opts.polls + 5);
    await committers.start();
    if (!(await lease.refresh())) throw new Error('the bench could not take the lag monitor lease of its own namespace');
    child = children.start('cli/main.js', ['start', '--config', configPath, '--roles', 'lag-monitor'], childEnv(env));
    const died = children.exited(child, `lag monitor (${total} partitions)`);
    const metricsUrl = `http://127.0.0.1:${opsPort}/metrics`;
    await Promise.race([waitForHttp(metricsUrl, 30_000), died]);
    const monitor = new MonitorUnderTest(redis, keys, metricsUrl, opts.intervalMs, died);

    // Start-up work (compiling, connecting) settles before the standby rate is measured.
    await Promise.race([sleep(STARTUP_SETTLE_MS), died]);
    await lease.refresh();
    const s0 = await monitor.metrics();
    const t0 = Date.now();
    for (let waited = 0; waited < opts.standbySec * 1000; waited += 5_000) {
      await Promise.race([sleep(Math.min(5_000, opts.standbySec * 1000 - waited)), died]);
      await lease.refresh();
    }
    const s1 = await monitor.metrics();
    const standbySec = (Date.now() - t0) / 1000;
    if (promSum(s1, 'sluice_lag_monitor_active') !== 0) throw new Error('the monitor under test became active while the bench held the lease');
    const standby = { partitions: total, cpuMsPerSec: ((promSum(s1, CPU) - promSum(s0, CPU)) * 1000) / standbySec, requestsPerSec: (promSum(s1, REQUESTS) - promSum(s0, REQUESTS)) / standbySec };
    await lease.release();

    // Warm-up: the record reader joins its group and reads every partition's record once.
    for (let i = 0; i < 3; i++) await monitor.nextPoll();
    const row = (scenario: string, m: Awaited<ReturnType<MonitorUnderTest['measure']>>): CostRow => ({
      partitions: total,
      scenario,
      polls: opts.polls,
      requestsPerPoll: m.requests / opts.polls,
      // The process's own idle cost (event loop, lease, metrics) is its standby rate: not the polls'.
      cpuMsPerPoll: Math.max(0, m.cpuSec * 1000 - standby.cpuMsPerSec * m.wallSec) / opts.polls,
      lastPollMs: m.lastPollMs,
    });
    const still = row('offsets still (timestamps cached)', await monitor.measure(opts.polls, async () => undefined));
    const moving = row(`offsets moving (${total} records read per poll)`, await monitor.measure(opts.polls, (poll) => committers.commit(poll)));
    return { standby, rows: [still, moving] };
  } finally {
    if (child) await children.stop(child);
    await committers.stop();
    await lease.release().catch(() => undefined);
    await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
    await admin.deleteGroups(consumerGroups(namespace).map((g) => g.group)).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await deleteKeys(redis, `*${namespace}*`).catch(() => undefined);
  }
}

const fixed = (n: number, width: number, digits = 1) => n.toFixed(digits).padStart(width);

function costTable(opts: LagBenchOptions, standbys: Standby[], rows: CostRow[]): string {
  const lines = [
    `lag monitor cost: one \`sluice start --roles lag-monitor\` process polling every ${opts.intervalMs} ms, ${opts.polls} polls per scenario; 4 groups over 5 topics, partitions spread 40/40/10/5/5 %`,
    'kafka req = sluice_lag_monitor_kafka_requests_total (admin and record reader); cpu = process CPU over the polls minus its standby rate; last poll = sluice_lag_monitor_scrape_seconds',
    '  partitions  scenario                                         kafka req/poll  cpu ms/poll  cpu ms/poll per 100 partitions  last poll ms',
  ];
  for (const r of rows) {
    lines.push(`  ${String(r.partitions).padStart(10)}  ${r.scenario.padEnd(47)}  ${fixed(r.requestsPerPoll, 14)}  ${fixed(r.cpuMsPerPoll, 11, 2)}  ${fixed((r.cpuMsPerPoll * 100) / r.partitions, 30, 2)}  ${fixed(r.lastPollMs, 12)}`);
  }
  for (const s of standbys) lines.push(`  standby (another instance holds the lease), ${s.partitions} partitions: ${s.cpuMsPerSec.toFixed(2)} ms CPU per second, ${s.requestsPerSec.toFixed(2)} Kafka requests per second`);
  return `${lines.join('\n')}\n`;
}

function processorTable(opts: LagBenchOptions, results: PhaseResult[]): string {
  const p = opts.processor;
  const lines = [
    `processor bench with and without a lag monitor in the processor's process (polling every ${opts.intervalMs} ms): ${p.runs} runs per phase (+${p.warmup} warm-up), support-reply, every simulator target at 0 ms, concurrency ${p.concurrency}, caps enforced`,
    '  phase                                  runs/s   cpu ms/run   redis cmds/run  outcomes',
  ];
  for (const r of results) {
    const outcomes = Object.entries(r.outcomes).map(([s, n]) => `${s}:${n}`).join(' ');
    lines.push(`  ${r.label.padEnd(36)} ${fixed(perSec(r), 8)} ${r.cpuSec === undefined ? '-'.padStart(12) : fixed((r.cpuSec * 1000) / r.runs, 12, 2)} ${fixed(r.redis.all / r.runs, 16, 2)}  ${outcomes}`);
  }
  const ratios: number[] = [];
  for (let i = 0; i + 1 < results.length; i += 2) {
    const [first, second] = [results[i]!, results[i + 1]!];
    const [without, withMonitor] = first.label.includes(WITH_MONITOR) ? [second, first] : [first, second];
    ratios.push(perSec(withMonitor) / perSec(without));
  }
  lines.push(`ratio (runs/s, with monitor / without), per round: ${ratios.map((r) => r.toFixed(2)).join(' ')}; mean ${(ratios.reduce((a, b) => a + b, 0) / ratios.length).toFixed(2)}`);
  return `${lines.join('\n')}\n`;
}

/**
 * `npm run bench lag`: the lag monitor's own cost (Kafka requests and CPU per poll, per 100
 * partitions), then the processor bench with and without a lag monitor beside the processor,
 * alternating, so the monitor's effect on throughput is read as a ratio within one run.
 */
export async function benchLag(opts: LagBenchOptions): Promise<void> {
  const standbys: Standby[] = [];
  const rows: CostRow[] = [];
  await withBenchHarness('lag', async ({ infra, children, redis, dir }) => {
    const ctx: Ctx = { opts, infra, children, redis, dir, stamp: Date.now().toString(36) };
    for (const total of opts.partitions) {
      const cost = await monitorCost(ctx, total);
      standbys.push(cost.standby);
      rows.push(...cost.rows);
      process.stderr.write(`  done: monitor over ${total} partitions\n`);
    }
  });
  const monitored = { lagMonitor: { intervalMs: opts.intervalMs, windowMs: Math.max(3 * opts.intervalMs, 60_000) } };
  const phases: BenchPhase[] = [];
  for (let r = 1; r <= opts.rounds; r++) {
    const pair: BenchPhase[] = [
      { label: `(a${r}) processor`, sluice: { enforceCaps: true, roles: 'processor' } },
      { label: `(b${r}) processor ${WITH_MONITOR}`, sluice: { enforceCaps: true, roles: 'processor,lag-monitor', config: monitored } },
    ];
    // a b, b a, a b, …: a drift over the run (a machine growing busier or quieter) does not read as the monitor's effect.
    phases.push(...(r % 2 === 1 ? pair : pair.reverse()));
  }
  const results = await runProcessorPhases(opts.processor, phases);
  process.stdout.write(`${costTable(opts, standbys, rows)}\n${processorTable(opts, results)}`);
}
