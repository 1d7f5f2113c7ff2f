/**
 * A Sluice processor under a bench: the provider simulator it calls, its configuration with every
 * cap at the bench's concurrency, and one processor process in a namespace of its own, fed
 * RunRequested events straight to Kafka and watched on the status topic.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { Consumer, Kafka } from 'kafkajs';
import { parseConfig } from '../../config/load.js';
import { EventCodec } from '../../events/codec.js';
import { FileSchemaRegistry } from '../../events/file-schema-registry.js';
import { SUBJECTS, type RunRequested, type RunStatusChanged } from '../../events/schemas.js';
import { createKafka } from '../../kafka/client.js';
import { ensureTopics, groupId, topicNames } from '../../kafka/topics.js';
import { EventProducer } from '../../producers/event-producer.js';
import { newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import { isTerminal } from '../../status/run-history.js';
import { freePort } from '../../util/free-port.js';
import { withTimeout } from '../../util/with-timeout.js';
import { waitForHttp } from './admission-bench.js';
import { benchConfigBase, childEnv, localConfig, writeYaml, type BenchHarness } from './bench-harness.js';
import { deleteKeys } from './bench-redis.js';
import { simAdmin } from './sim-admin.js';

const TENANTS = ['tenant-a', 'tenant-b', 'tenant-c'];

/** A run of `workflow` asking about order `i`, admitted now, the tenants taking turns. */
export function runRequest(workflow: string, i: number): RunRequested {
  const now = Date.now();
  return {
    runId: newRunId(now),
    tenantId: TENANTS[i % TENANTS.length]!,
    workflow,
    class: 'interactive',
    admittedAt: now,
    deadline: now + 600_000,
    attempt: 1,
    traceparent: childTraceparent(undefined),
    input: JSON.stringify({ message: 'Where is order 42?', orderId: String(i) }),
    idempotencyKey: null,
    dueAt: null,
  };
}

/** local.yaml with every cap at `concurrency` (high enough not to throttle, but enforced). */
export function sluiceConfigDoc(o: { simulatorUrl: string; registryDir: string; concurrency: number; enforceCaps: boolean; opsPort: number }): Record<string, any> {
  const c = benchConfigBase(o);
  const n = o.concurrency;
  c.limits = { global: n };
  c.admission = { maxBacklog: 100_000_000 };
  c.processor = { maxInFlight: n, enforceCaps: o.enforceCaps };
  for (const t of Object.values<any>(c.tenants)) {
    t.maxConcurrency = n;
    t.admission = { bucket: { capacity: 1_000_000, refillPerSec: 1_000_000 }, maxBacklog: 10_000_000 };
  }
  for (const d of Object.values<any>(c.dependencies)) d.maxConcurrency = n;
  for (const w of Object.values<any>(c.workflows)) w.maxConcurrency = n;
  return c;
}

/** Every target at 0 ms, no jitter, no errors; verified by reading the profiles back. */
async function zeroLatency(simulatorUrl: string): Promise<void> {
  const profiles = (await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, unknown>;
  for (const target of Object.keys(profiles)) {
    await simAdmin(simulatorUrl, 'PUT', '/faults', { target, latencyMs: 0, jitterMs: 0, errorRate: 0, hang: false });
  }
  const after = (await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, { latencyMs: number; jitterMs: number }>;
  const slow = Object.entries(after).filter(([, p]) => p.latencyMs !== 0 || p.jitterMs !== 0);
  if (slow.length > 0) throw new Error(`simulator targets still have latency: ${slow.map(([t]) => t).join(', ')}`);
}

/** Starts the provider simulator as a child with every target at 0 ms; answers its URL. */
export async function startSimulator({ children, dir }: BenchHarness): Promise<string> {
  const simPort = await freePort();
  const simDoc = localConfig();
  simDoc.localInfra = false;
  simDoc.logLevel = 'warn';
  simDoc.simulator = { ...simDoc.simulator, host: '127.0.0.1', port: simPort };
  const sim = children.start('cli/main.js', ['start', '--config', writeYaml(dir, 'sim.yaml', simDoc), '--roles', 'provider-sim'], childEnv({}));
  const simulatorUrl = `http://127.0.0.1:${simPort}`;
  await Promise.race([waitForHttp(`${simulatorUrl}/healthz`, 30_000), children.exited(sim, 'provider simulator')]);
  await zeroLatency(simulatorUrl);
  return simulatorUrl;
}

/**
 * Reads the namespace's status topic from the beginning in consumer group `group`, handing each
 * event to `onEvent` with the time its batch reached the bench.
 */
export async function consumeStatuses(kafka: Kafka, codec: EventCodec, namespace: string, group: string, onEvent: (e: RunStatusChanged, receivedAt: number) => void): Promise<Consumer> {
  const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 50, allowAutoTopicCreation: false });
  await consumer.connect();
  await consumer.subscribe({ topics: [topicNames(namespace).status], fromBeginning: true });
  await consumer.run({
    partitionsConsumedConcurrently: 6,
    eachBatch: async ({ batch }) => {
      const receivedAt = Date.now();
      for (const m of batch.messages) onEvent(await codec.decode<RunStatusChanged>(m.value, SUBJECTS.runStatusChanged), receivedAt);
    },
  });
  return consumer;
}

/** How a run ended, by its terminal status event. */
export interface Finish {
  status: string;
  /** The terminal status event's occurredAt. */
  at: number;
  /** When the attempt that ended it started executing, if the event says. */
  attemptStartedAt: number | null;
}

/** Terminal status events of the runs it is asked about, read from the status topic. */
class StatusWatcher {
  private readonly finished = new Map<string, Finish>();
  private target: { ids: Set<string>; done: number; resolve: (at: number) => void } | undefined;

  private consumer: Consumer | undefined;

  static async start(kafka: Kafka, codec: EventCodec, namespace: string): Promise<StatusWatcher> {
    const watcher = new StatusWatcher();
    watcher.consumer = await consumeStatuses(kafka, codec, namespace, `${namespace}bench.status-watch`, (e) => {
      if (isTerminal(e.status)) watcher.record(e.runId, { status: e.status, at: e.occurredAt, attemptStartedAt: e.attemptStartedAt });
    });
    return watcher;
  }

  private record(runId: string, finish: Finish): void {
    if (this.finished.has(runId)) return;
    this.finished.set(runId, finish);
    const t = this.target;
    if (t?.ids.has(runId) && ++t.done === t.ids.size) {
      this.target = undefined;
      t.resolve(Date.now());
    }
  }

  /** Resolves with the time the last of `ids` was seen finished; must be called before submitting them. */
  expect(ids: Set<string>): Promise<number> {
    return new Promise((resolve) => {
      this.target = { ids, done: [...ids].filter((id) => this.finished.has(id)).length, resolve };
      if (this.target.done === ids.size) resolve(Date.now());
    });
  }

  tally(ids: Iterable<string>): Record<string, number> {
    const out: Record<string, number> = {};
    for (const id of ids) {
      const s = this.finished.get(id)?.status ?? 'unfinished';
      out[s] = (out[s] ?? 0) + 1;
    }
    return out;
  }

  finish(runId: string): Finish | undefined {
    return this.finished.get(runId);
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect();
  }
}

/** Times of one batch of runs: the first publish, the last publish acknowledged, the last run seen finished. */
export interface BatchTimes {
  startedAt: number;
  submittedAt: number;
  finishedAt: number;
}

/** One processor process under a bench, from its first run to its clean-up. */
export interface SluiceProcess {
  namespace: string;
  metricsUrl: string;
  /** Publishes `runs` and resolves when the status topic shows every one finished. */
  runAll(runs: RunRequested[], timeoutMs: number, what: string): Promise<BatchTimes>;
  tally(runs: Iterable<string>): Record<string, number>;
  /** How the run ended, if the status topic has shown it yet. */
  finish(runId: string): Finish | undefined;
}

/** What a processor under a bench is: its config (sluiceConfigDoc's, changed as the bench needs), roles and place. */
export interface SluiceProcessSpec {
  label: string;
  /** Names the namespace and the config file: unique within a bench run. */
  index: number;
  stamp: string;
  /** `processor`, or more roles beside it in the same process. */
  roles: string;
  config: (o: { registryDir: string; opsPort: number }) => Record<string, any>;
  /** Events the producer may hold unacknowledged. */
  maxPending: number;
  /** When set, the processor runs under `node --cpu-prof` and writes its profile here on exit. */
  cpuProfDir?: string;
}

/**
 * Runs `body` against one Sluice processor process in a fresh namespace (its topics, consumer
 * group and Redis keys), with a typed producer (acks=all) and a status watcher; afterwards the
 * process is stopped and everything of the namespace deleted.
 */
export async function withSluiceProcess<T>(h: BenchHarness, spec: SluiceProcessSpec, body: (p: SluiceProcess) => Promise<T>): Promise<T> {
  const { infra, children } = h;
  const namespace = `bench-proc-${spec.stamp}-${spec.index}.`;
  const registryDir = join(h.dir, 'schema-registry');
  const opsPort = await freePort();
  const doc = spec.config({ registryDir, opsPort });
  const configPath = writeYaml(h.dir, `sluice-${spec.index}.yaml`, doc);
  const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace };
  const config = parseConfig(doc, env, configPath);

  const kafka = createKafka(config.kafka, h.logger, `bench-${process.pid}`);
  const admin = kafka.admin();
  await admin.connect();
  const codec = new EventCodec(new FileSchemaRegistry(registryDir));
  let producer: EventProducer | undefined;
  let watcher: StatusWatcher | undefined;
  let child: ChildProcess | undefined;
  try {
    await ensureTopics(admin, config.kafka, namespace);
    const events = await EventProducer.connect(kafka, codec, topicNames(namespace), { maxPending: spec.maxPending });
    producer = events;
    const statuses = await StatusWatcher.start(kafka, codec, namespace);
    watcher = statuses;
    const profile = spec.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', spec.cpuProfDir, '--cpu-prof-name', `processor-phase-${spec.index}.cpuprofile`] : [];
    child = children.start('cli/main.js', ['start', '--config', configPath, '--roles', spec.roles], childEnv(env), false, profile);
    const died = children.exited(child, `sluice processor (${spec.label})`);
    const runAll = async (runs: RunRequested[], timeoutMs: number, what: string): Promise<BatchTimes> => {
      const done = statuses.expect(new Set(runs.map((r) => r.runId)));
      const startedAt = Date.now();
      await Promise.race([Promise.all(runs.map((r) => events.publishRunRequested(r, 30_000))), died]);
      const submittedAt = Date.now();
      const finishedAt = await Promise.race([withTimeout(done, timeoutMs, `${spec.label} ${what}`), died]);
      return { startedAt, submittedAt, finishedAt };
    };
    return await body({
      namespace,
      metricsUrl: `http://127.0.0.1:${opsPort}/metrics`,
      runAll,
      tally: (ids) => statuses.tally(ids),
      finish: (id) => statuses.finish(id),
    });
  } finally {
    if (child) await children.stop(child);
    await watcher?.stop().catch(() => undefined);
    await producer?.close().catch(() => undefined);
    // Leave nothing behind: the namespace's topics, consumer groups and Redis keys (step journal).
    await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
    await admin.deleteGroups([groupId(namespace, 'processor'), `${namespace}bench.status-watch`]).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await deleteKeys(h.redis, `${namespace}*`).catch(() => undefined);
  }
}
