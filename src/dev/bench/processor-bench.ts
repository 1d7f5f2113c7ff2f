import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type { Consumer, Kafka } from 'kafkajs';
import { pino } from 'pino';
import { parse, stringify } from 'yaml';
import { parseConfig } from '../../config/load.js';
import { EventCodec } from '../../events/codec.js';
import { FileSchemaRegistry } from '../../events/file-schema-registry.js';
import { SUBJECTS, type RunRequested, type RunStatusChanged } from '../../events/schemas.js';
import { infraUp } from '../infra/local-infra.js';
import { createKafka } from '../../kafka/client.js';
import { ensureTopics, groupId, topicNames } from '../../kafka/topics.js';
import { createLogger, type Logger } from '../../obs/logger.js';
import { EventProducer } from '../../producers/event-producer.js';
import { newRunId } from '../../runs/run-id.js';
import { SCRIPTS, type ScriptName, scriptSource } from '../../redis/scripts.js';
import { childTraceparent } from '../../runs/traceparent.js';
import { isTerminal } from '../../status/run-history.js';
import { packageRoot } from '../../util/package-root.js';
import type { BullJobData, BullWork, WatchMessage, WorkerMessage } from './bullmq-worker.js';
import { waitForHttp } from './admission-bench.js';
import { freePort } from '../../util/free-port.js';
import { deleteKeys } from './bench-redis.js';
import { withTimeout } from '../../util/with-timeout.js';
import { simAdmin } from './sim-admin.js';
import { promSum } from './sizing-figures.js';

export interface ProcessorBenchOptions {
  /** Runs (jobs) measured per phase. */
  runs: number;
  /** Runs (jobs) pushed through each phase before measuring: JIT, connections, group join. */
  warmup: number;
  /** maxInFlight, every cap and the BullMQ worker's concurrency. */
  concurrency: number;
  /** Upper bound on one measured phase, from the first submit to the last completion. */
  phaseTimeoutSec: number;
  /** When set, each Sluice processor runs under `node --cpu-prof` and writes its profile here on exit. */
  cpuProfDir?: string;
}

const TENANTS = ['tenant-a', 'tenant-b', 'tenant-c'];
const WORKFLOW = 'support-reply';
/** Idle window (per phase, just before measuring) whose Redis calls are scaled and subtracted. */
const IDLE_BASELINE_MS = 1_000;
const WARMUP_TIMEOUT_MS = 90_000;
/** Runs of the window after a Sluice phase whose Redis commands are counted one by one (MONITOR slows Redis, so not while measuring). */
const COUNTED_RUNS = 100;
const STOP_GRACE_MS = 25_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Child processes: every one is tracked, stopped at the end of its phase, and killed on any exit.

export class Children {
  private readonly live = new Set<ChildProcess>();
  private readonly tails = new Map<ChildProcess, string[]>();

  start(script: string, args: string[], env: NodeJS.ProcessEnv, ipc = false, nodeArgs: readonly string[] = []): ChildProcess {
    const child = spawn(process.execPath, [...nodeArgs, join(packageRoot(), 'dist', script), ...args], {
      env,
      stdio: ipc ? ['ignore', 'pipe', 'inherit', 'ipc'] : ['ignore', 'pipe', 'inherit'],
    });
    const tail: string[] = [];
    this.tails.set(child, tail);
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      tail.push(...chunk.split('\n').filter(Boolean));
      tail.splice(0, Math.max(0, tail.length - 30));
    });
    this.live.add(child);
    child.once('exit', () => this.live.delete(child));
    return child;
  }

  /** The child's last stdout lines (pino JSON), for error messages. */
  tail(child: ChildProcess): string {
    return (this.tails.get(child) ?? []).join('\n');
  }

  /** Rejects as soon as the child exits: race it against anything that waits on the child. */
  exited(child: ChildProcess, what: string): Promise<never> {
    const p = new Promise<never>((_, reject) => {
      const fail = (code: number | null, signal: string | null) => reject(new Error(`${what} exited early (code ${code}, signal ${signal}); its last output:\n${this.tail(child)}`));
      if (child.exitCode !== null || child.signalCode !== null) fail(child.exitCode, child.signalCode);
      else child.once('exit', fail);
    });
    // Handled here so a child stopped on purpose later is not an unhandled rejection.
    p.catch(() => undefined);
    return p;
  }

  /** SIGTERM, then SIGKILL after the grace period. */
  async stop(child: ChildProcess, graceMs = STOP_GRACE_MS): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exit = once(child, 'exit');
    child.kill('SIGTERM');
    const inTime = await Promise.race([exit.then(() => true), sleep(graceMs).then(() => false)]);
    if (!inTime) {
      child.kill('SIGKILL');
      await Promise.race([exit, sleep(2_000)]);
    }
  }

  stopAll(): Promise<void> {
    return Promise.all([...this.live].map((c) => this.stop(c))).then(() => undefined);
  }

  /** Synchronous last resort (process 'exit', signals): nothing is left running. */
  killAll(): void {
    for (const c of this.live) c.kill('SIGKILL');
  }
}

// ---------------------------------------------------------------------------------------------
// Redis server statistics.

type CommandCalls = Map<string, number>;

async function commandCalls(redis: Redis): Promise<CommandCalls> {
  const text = await redis.info('commandstats');
  const calls = new Map<string, number>();
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1]!, Number(m[2]));
  return calls;
}

/** Commands Sluice's Lua scripts run inside EVALSHA: counted by commandstats, but not round trips. */
function luaInnerCommands(): Set<string> {
  const names = new Set<string>();
  for (const script of Object.keys(SCRIPTS) as ScriptName[]) {
    for (const m of scriptSource(script).matchAll(/redis\.p?call\(\s*['"]([A-Za-z]+)['"]/g)) names.add(m[1]!.toLowerCase());
  }
  return names;
}

/**
 * What one run asks of Redis, counted exactly: MONITOR shows each command a client sent (a Lua
 * script's own commands are marked `lua` and left out), and only commands naming the phase's
 * namespace count, so other users of the same Redis do not. Every Sluice Redis call on a run's
 * path is one command (one EVALSHA or one plain command, no pipelines), so commands are round
 * trips. The processor's background (breaker polls, lease renewals, retry budget reports), counted
 * over an idle second just before, is subtracted at its rate; `withIdle` keeps it.
 */
export interface RunRoundTrips {
  runs: number;
  commands: number;
  evalsha: number;
  withIdle: number;
}

interface Counted {
  commands: number;
  evalsha: number;
}

/** Counts the Redis commands naming `namespace` over an idle second, then while `body` runs. */
async function countRoundTrips(redis: Redis, namespace: string, runs: number, body: () => Promise<void>): Promise<RunRoundTrips> {
  // Listeners before connecting: on a busy server, lines can arrive before ioredis has switched the
  // connection to monitoring, and while it closes; each is an 'error' on it (a line not counted).
  const monitor = redis.duplicate({ monitor: true, lazyConnect: true });
  let window: Counted = { commands: 0, evalsha: 0 };
  let counting = false;
  let failure: Error | undefined;
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === 'lua' || !args.some((a) => a.includes(namespace))) return;
    window.commands++;
    if (args[0]?.toLowerCase() === 'evalsha') window.evalsha++;
  });
  monitor.on('error', (err: Error) => {
    if (counting) failure ??= err;
  });
  let idle: Counted;
  let scale: number;
  try {
    await Promise.all([once(monitor, 'monitoring'), monitor.connect()]);
    window = { commands: 0, evalsha: 0 };
    counting = true;
    await sleep(IDLE_BASELINE_MS);
    idle = window;
    window = { commands: 0, evalsha: 0 };
    const started = Date.now();
    await body();
    scale = (Date.now() - started) / IDLE_BASELINE_MS;
  } finally {
    counting = false;
    monitor.disconnect();
  }
  if (failure) throw new Error(`the MONITOR connection failed while counting: ${failure.message}`);
  return { runs, commands: Math.max(0, window.commands - idle.commands * scale), evalsha: Math.max(0, window.evalsha - idle.evalsha * scale), withIdle: window.commands };
}

interface RedisDelta {
  /** Every command Redis executed, inside Lua included. */
  all: number;
  /** Client commands: not run from inside a Sluice Lua script (meaningful for the Sluice phases). */
  topLevel: number;
  byCommand: [string, number][];
}

/** Our own INFO calls are left out. */
function delta(before: CommandCalls, after: CommandCalls, inner: Set<string>): RedisDelta {
  let all = 0;
  let topLevel = 0;
  const byCommand: [string, number][] = [];
  for (const [cmd, n] of after) {
    if (cmd === 'info') continue;
    const d = n - (before.get(cmd) ?? 0);
    if (d <= 0) continue;
    all += d;
    if (!inner.has(cmd)) topLevel += d;
    byCommand.push([cmd, d]);
  }
  byCommand.sort((a, b) => b[1] - a[1]);
  return { all, topLevel, byCommand };
}

// ---------------------------------------------------------------------------------------------
// Configuration and the simulator.

export function localConfig(): Record<string, any> {
  return parse(readFileSync(join(packageRoot(), 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
}

/** local.yaml pointed at the bench's simulator, registry and ops port, logging at warn; caps are the caller's. */
export function benchConfigBase(o: { simulatorUrl: string; registryDir: string; opsPort: number }): Record<string, any> {
  const c = localConfig();
  c.localInfra = false;
  c.logLevel = 'warn';
  c.opsPort = o.opsPort;
  c.schemaRegistry = { dir: o.registryDir };
  c.simulator = { ...c.simulator, url: o.simulatorUrl };
  c.anthropic = { baseUrl: o.simulatorUrl };
  return c;
}

export function writeYaml(dir: string, name: string, doc: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, stringify(doc));
  return path;
}

/** local.yaml with every cap at `concurrency` (high enough not to throttle, but enforced). */
function sluiceConfigDoc(o: { simulatorUrl: string; registryDir: string; concurrency: number; enforceCaps: boolean; opsPort: number }): Record<string, any> {
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

/** The children must never reach the real Anthropic API, whatever this shell has set. */
export function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env.ANTHROPIC_API_KEY;
  delete env.ANTHROPIC_BASE_URL;
  delete env.SLUICE_CONFIG;
  delete env.SLUICE_ROLES;
  return env;
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

interface SimWindow {
  calls: number;
  errors: number;
}

async function simWindow(simulatorUrl: string): Promise<SimWindow> {
  const s = (await simAdmin(simulatorUrl, 'GET', '/stats')) as { calls: Record<string, number>; errors: Record<string, number> };
  const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
  return { calls: sum(s.calls), errors: sum(s.errors) };
}

/** The processor's Prometheus text, or undefined if it cannot be read (diagnostics only). */
export async function scrape(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return res.ok ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Phases.

export interface PhaseResult {
  label: string;
  runs: number;
  submitSec: number;
  totalSec: number;
  outcomes: Record<string, number>;
  redis: RedisDelta;
  /** Idle calls per ms measured just before the phase, already subtracted from `redis`. */
  idlePerSec: { all: number; topLevel: number };
  sim: SimWindow;
  roundTrips: boolean;
  /** Seconds spent executing runs (Sluice: sluice_run_execution_seconds; BullMQ: the processor function), summed. */
  execSec?: number;
  /** Seconds of dependency calls (Sluice: sluice_step_call_seconds, after the permit), summed. */
  stepSec?: number;
  /** Seconds runs waited in the dispatcher for permits and a slot (sluice_run_queue_wait_seconds), summed. */
  queueWaitSec?: number;
  /** CPU seconds (user + system) of the processor or worker process over the window. */
  cpuSec?: number;
  /** Event-loop delay of the Sluice processor over the window (prom-client's monitor), mean and p99. */
  lagMs?: { mean: number; p99: number };
  /** Sluice: Redis round trips of the runs of a short counting window after the measured one. */
  roundTripCount?: RunRoundTrips;
}

export const perSec = (r: PhaseResult) => r.runs / r.totalSec;

function subtractIdle(d: RedisDelta, idle: RedisDelta, idleMs: number, phaseMs: number): RedisDelta {
  const scale = phaseMs / idleMs;
  return { all: Math.max(0, d.all - idle.all * scale), topLevel: Math.max(0, d.topLevel - idle.topLevel * scale), byCommand: d.byCommand };
}

/** Terminal status events of the runs it is asked about, read from the status topic. */
class StatusWatcher {
  private readonly outcomes = new Map<string, string>();
  private target: { ids: Set<string>; done: number; resolve: (at: number) => void } | undefined;

  private constructor(private readonly consumer: Consumer) {}

  static async start(kafka: Kafka, codec: EventCodec, namespace: string): Promise<StatusWatcher> {
    const consumer = kafka.consumer({ groupId: `${namespace}bench.status-watch`, maxWaitTimeInMs: 50, allowAutoTopicCreation: false });
    const watcher = new StatusWatcher(consumer);
    await consumer.connect();
    await consumer.subscribe({ topics: [topicNames(namespace).status], fromBeginning: true });
    await consumer.run({
      partitionsConsumedConcurrently: 6,
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) {
          const e = await codec.decode<RunStatusChanged>(m.value, SUBJECTS.runStatusChanged);
          if (isTerminal(e.status)) watcher.record(e.runId, e.status);
        }
      },
    });
    return watcher;
  }

  private record(runId: string, status: string): void {
    if (this.outcomes.has(runId)) return;
    this.outcomes.set(runId, status);
    const t = this.target;
    if (t?.ids.has(runId) && ++t.done === t.ids.size) {
      this.target = undefined;
      t.resolve(Date.now());
    }
  }

  /** Resolves with the time the last of `ids` was seen finished; must be called before submitting them. */
  expect(ids: Set<string>): Promise<number> {
    return new Promise((resolve) => {
      this.target = { ids, done: [...ids].filter((id) => this.outcomes.has(id)).length, resolve };
      if (this.target.done === ids.size) resolve(Date.now());
    });
  }

  tally(ids: Iterable<string>): Record<string, number> {
    const out: Record<string, number> = {};
    for (const id of ids) {
      const s = this.outcomes.get(id) ?? 'unfinished';
      out[s] = (out[s] ?? 0) + 1;
    }
    return out;
  }

  stop(): Promise<void> {
    return this.consumer.disconnect();
  }
}

interface Ctx {
  opts: ProcessorBenchOptions;
  infra: { kafkaBrokers: string[]; redisUrl: string; databaseUrl: string };
  children: Children;
  redis: Redis;
  simulatorUrl: string;
  dir: string;
  stamp: string;
  logger: Logger;
  luaInner: Set<string>;
}

function runRequest(i: number): RunRequested {
  const now = Date.now();
  return {
    runId: newRunId(now),
    tenantId: TENANTS[i % TENANTS.length]!,
    workflow: WORKFLOW,
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

/** Measures `measure()` and the Redis calls around it, minus an idle window just before it. */
async function measureRedis<T>(ctx: Ctx, measure: () => Promise<T>): Promise<{ value: T; redis: RedisDelta; idlePerSec: { all: number; topLevel: number } }> {
  const i0 = await commandCalls(ctx.redis);
  await sleep(IDLE_BASELINE_MS);
  const i1 = await commandCalls(ctx.redis);
  const idle = delta(i0, i1, ctx.luaInner);
  const started = Date.now();
  const value = await measure();
  const s1 = await commandCalls(ctx.redis);
  const raw = delta(i1, s1, ctx.luaInner);
  const phaseMs = Date.now() - started;
  return { value, redis: subtractIdle(raw, idle, IDLE_BASELINE_MS, phaseMs), idlePerSec: { all: (idle.all * 1000) / IDLE_BASELINE_MS, topLevel: (idle.topLevel * 1000) / IDLE_BASELINE_MS } };
}

/** What a Sluice phase runs: caps enforced or not, the roles of its one process, and config over the bench's. */
export interface SluicePhase {
  enforceCaps: boolean;
  /** `processor`, or more roles beside it in the same process. */
  roles: string;
  config?: Record<string, unknown>;
}

/**
 * Sluice end to end: RunRequested events published straight to Kafka with the typed producer
 * (acks=all), one processor process (its own consumer group, namespace and Redis keys), and the
 * clock stopped when the status topic shows the last run finished.
 */
async function sluicePhase(ctx: Ctx, label: string, phase: SluicePhase, index: number): Promise<PhaseResult> {
  const { opts, infra, children } = ctx;
  const namespace = `bench-proc-${ctx.stamp}-${index}.`;
  const registryDir = join(ctx.dir, 'schema-registry');
  const opsPort = await freePort();
  const doc = { ...sluiceConfigDoc({ simulatorUrl: ctx.simulatorUrl, registryDir, concurrency: opts.concurrency, enforceCaps: phase.enforceCaps, opsPort }), ...phase.config };
  const configPath = writeYaml(ctx.dir, `sluice-${index}.yaml`, doc);
  const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace };
  const config = parseConfig(doc, env, configPath);

  const kafka = createKafka(config.kafka, ctx.logger, `bench-${process.pid}`);
  const admin = kafka.admin();
  await admin.connect();
  const codec = new EventCodec(new FileSchemaRegistry(registryDir));
  let producer: EventProducer | undefined;
  let watcher: StatusWatcher | undefined;
  let child: ChildProcess | undefined;
  try {
    await ensureTopics(admin, config.kafka, namespace);
    producer = await EventProducer.connect(kafka, codec, topicNames(namespace), { maxPending: opts.runs + opts.warmup + 1_000 });
    watcher = await StatusWatcher.start(kafka, codec, namespace);
    const profile = opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir, '--cpu-prof-name', `processor-phase-${index}.cpuprofile`] : [];
    child = children.start('cli/main.js', ['start', '--config', configPath, '--roles', phase.roles], childEnv(env), false, profile);
    const died = children.exited(child, `sluice processor (${label})`);
    const publishAll = (runs: RunRequested[]) => Promise.all(runs.map((r) => producer!.publishRunRequested(r, 30_000)));

    // Warm-up: the processor joins its group and reads from the beginning, so these wait for it.
    const warm = Array.from({ length: opts.warmup }, (_, i) => runRequest(i));
    const warmDone = watcher.expect(new Set(warm.map((r) => r.runId)));
    await Promise.race([publishAll(warm), died]);
    await Promise.race([withTimeout(warmDone, WARMUP_TIMEOUT_MS, `${label} warm-up`), died]);

    await simAdmin(ctx.simulatorUrl, 'POST', '/stats/reset');
    const runs = Array.from({ length: opts.runs }, (_, i) => runRequest(i));
    const ids = new Set(runs.map((r) => r.runId));
    // Scraped outside the Redis window: a scrape reads permit gauges from Redis.
    const metricsUrl = `http://127.0.0.1:${opsPort}/metrics`;
    const before = await scrape(metricsUrl);
    const m = await measureRedis(ctx, async () => {
      const done = watcher!.expect(ids);
      const t0 = Date.now();
      await Promise.race([publishAll(runs), died]);
      const submitted = Date.now();
      const end = await Promise.race([withTimeout(done, opts.phaseTimeoutSec * 1000, `${label} measured runs`), died]);
      return { submitSec: (submitted - t0) / 1000, totalSec: (end - t0) / 1000 };
    });
    const after = await scrape(metricsUrl);
    const sim = await simWindow(ctx.simulatorUrl);
    const counted = Array.from({ length: COUNTED_RUNS }, (_, i) => runRequest(i));
    const roundTripCount = await countRoundTrips(ctx.redis, namespace, counted.length, async () => {
      const done = watcher!.expect(new Set(counted.map((r) => r.runId)));
      await Promise.race([publishAll(counted), died]);
      await Promise.race([withTimeout(done, opts.phaseTimeoutSec * 1000, `${label} counted runs`), died]);
    });
    const diff = (name: string) => (after && before ? promSum(after, name) - promSum(before, name) : undefined);
    return {
      label,
      runs: opts.runs,
      submitSec: m.value.submitSec,
      totalSec: m.value.totalSec,
      outcomes: watcher.tally(ids),
      redis: m.redis,
      idlePerSec: m.idlePerSec,
      sim,
      roundTrips: true,
      execSec: diff('sluice_run_execution_seconds_sum'),
      stepSec: diff('sluice_step_call_seconds_sum'),
      queueWaitSec: diff('sluice_run_queue_wait_seconds_sum'),
      cpuSec: diff('sluice_process_process_cpu_seconds_total'),
      roundTripCount,
      ...(after ? { lagMs: { mean: promSum(after, 'sluice_process_nodejs_eventloop_lag_mean_seconds') * 1000, p99: promSum(after, 'sluice_process_nodejs_eventloop_lag_p99_seconds') * 1000 } } : {}),
    };
  } finally {
    if (child) await children.stop(child);
    await watcher?.stop().catch(() => undefined);
    await producer?.close().catch(() => undefined);
    // Leave nothing behind: the namespace's topics, consumer groups and Redis keys (step journal).
    await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
    await admin.deleteGroups([groupId(namespace, 'processor'), `${namespace}bench.status-watch`]).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await deleteKeys(ctx.redis, `${namespace}*`).catch(() => undefined);
  }
}

/** BullMQ: addBulk of N jobs, one worker process with the same concurrency, on the same Redis. */
async function bullPhase(ctx: Ctx, label: string, work: BullWork): Promise<PhaseResult> {
  const { opts, children } = ctx;
  const queueName = `bench-proc-${ctx.stamp}-${work}`;
  const prefix = 'sluice-bench-bull';
  const connection = new Redis(ctx.infra.redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue<BullJobData>(queueName, { connection, prefix });
  const child = children.start(
    'dev/bench/main.js',
    ['bullmq-worker', '--redis', ctx.infra.redisUrl, '--queue', queueName, '--prefix', prefix, '--concurrency', String(opts.concurrency), '--work', work, '--sim', ctx.simulatorUrl],
    childEnv({}),
    true,
  );
  const died = children.exited(child, `bullmq worker (${label})`);
  const messages: WorkerMessage[] = [];
  const waiters: (() => void)[] = [];
  child.on('message', (msg: WorkerMessage) => {
    messages.push(msg);
    for (const w of waiters.splice(0)) w();
  });
  const next = async <K extends WorkerMessage['type']>(pred: (m: WorkerMessage) => m is Extract<WorkerMessage, { type: K }>, ms: number, what: string) => {
    const wait = async () => {
      for (;;) {
        const found = messages.find(pred);
        if (found) {
          messages.splice(messages.indexOf(found), 1);
          return found;
        }
        await new Promise<void>((r) => waiters.push(r));
      }
    };
    return Promise.race([withTimeout(wait(), ms, what), died]);
  };
  let watchId = 0;
  const watch = (target: number) => {
    const id = ++watchId;
    child.send({ type: 'watch', id, target } satisfies WatchMessage);
    const done = next((m): m is Extract<WorkerMessage, { type: 'done' }> => m.type === 'done' && m.id === id, opts.phaseTimeoutSec * 1000, `${label} jobs`);
    // Awaited by the caller unless enqueueing failed first: never an unhandled rejection.
    done.catch(() => undefined);
    return done;
  };
  const jobOpts = { removeOnComplete: true, removeOnFail: 1_000 };
  const addAll = async (n: number) => {
    const jobs = Array.from({ length: n }, (_, i) => {
      const r = runRequest(i);
      return { name: WORKFLOW, data: { tenantId: r.tenantId, runId: r.runId, input: JSON.parse(r.input) as unknown }, opts: jobOpts };
    });
    const chunks: (typeof jobs)[] = [];
    for (let i = 0; i < jobs.length; i += 500) chunks.push(jobs.slice(i, i + 500));
    await Promise.all(chunks.map((c) => queue.addBulk(c)));
  };
  try {
    await next((m): m is Extract<WorkerMessage, { type: 'ready' }> => m.type === 'ready', 30_000, `${label} worker start`);
    const warmDone = watch(opts.warmup);
    await addAll(opts.warmup);
    await warmDone;

    await simAdmin(ctx.simulatorUrl, 'POST', '/stats/reset');
    const m = await measureRedis(ctx, async () => {
      const done = watch(opts.runs);
      const t0 = Date.now();
      await addAll(opts.runs);
      const submitted = Date.now();
      const d = await done;
      return { submitSec: (submitted - t0) / 1000, totalSec: (d.at - t0) / 1000, busySec: d.busyMs / 1000, cpuSec: d.cpuMs / 1000, outcomes: { completed: d.completed, ...(d.failed > 0 ? { failed: d.failed } : {}) } };
    });
    const sim = await simWindow(ctx.simulatorUrl);
    const v = m.value;
    return { label, runs: opts.runs, submitSec: v.submitSec, totalSec: v.totalSec, outcomes: v.outcomes, redis: m.redis, idlePerSec: m.idlePerSec, sim, roundTrips: false, execSec: v.busySec, cpuSec: v.cpuSec };
  } finally {
    await children.stop(child);
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close().catch(() => undefined);
    connection.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------
// Output.

const num = (n: number, width: number, digits = 1) => n.toFixed(digits).padStart(width);
const opt = (n: number | undefined, f: (x: number) => number, width: number, digits = 1) => (n === undefined ? '-'.padStart(width) : num(f(n), width, digits));

function table(results: PhaseResult[], opts: ProcessorBenchOptions): string {
  const lines = [
    `processor bench: ${opts.runs} runs per phase (+${opts.warmup} warm-up), workflow ${WORKFLOW} (llm → order-lookup → llm), every simulator target at 0 ms, concurrency ${opts.concurrency}`,
    'runs/s = runs / (last completion − first submit); redis per run = INFO commandstats deltas / runs, idle rate subtracted; cmds include those run inside Lua, the round trips column leaves out every command some Lua script also runs (so GET, SET…): the exact count is the "Redis round trips per run" line',
    'exec ms = mean time a run spends executing (Sluice: RunExecutor.execute incl. acknowledging its 4 status events, of which only the outcome is waited for; BullMQ: the processor function); in flight = Σexec / total (Little); cpu ms = processor/worker process CPU per run',
    '  phase                                     runs  submit s   total s    runs/s  exec ms  in flight  cpu ms  redis cmds/run  round trips/run  sim calls/run  outcomes',
  ];
  for (const r of results) {
    const outcomes = Object.entries(r.outcomes).map(([s, n]) => `${s}:${n}`).join(' ');
    lines.push(
      `  ${r.label.padEnd(40)} ${String(r.runs).padStart(5)} ${num(r.submitSec, 9, 2)} ${num(r.totalSec, 9, 2)} ${num(perSec(r), 9)} ${opt(r.execSec, (x) => (x * 1000) / r.runs, 8)} ${opt(r.execSec, (x) => x / r.totalSec, 10)} ${opt(r.cpuSec, (x) => (x * 1000) / r.runs, 7, 2)} ${num(r.redis.all / r.runs, 15, 2)} ${(r.roundTrips ? num(r.redis.topLevel / r.runs, 16, 2) : '-'.padStart(16))} ${num(r.sim.calls / r.runs, 14, 2)}  ${outcomes}`,
    );
  }
  const [a, b, c] = results;
  if (a && b && c) {
    lines.push(`ratios (runs/s): a/c ${(perSec(a) / perSec(c)).toFixed(2)}   b/c ${(perSec(b) / perSec(c)).toFixed(2)}   a/b ${(perSec(a) / perSec(b)).toFixed(2)}`);
    lines.push(`caps cost: ${((a.redis.topLevel - b.redis.topLevel) / a.runs).toFixed(2)} extra round trips and ${((a.redis.all - b.redis.all) / a.runs).toFixed(2)} extra Redis commands per run`);
  }
  lines.push(`idle Redis calls subtracted (per s, measured 1 s before each phase): ${results.map((r) => `${r.label.split(' ')[0]} ${r.idlePerSec.all.toFixed(1)}`).join(', ')}`);
  for (const r of results) {
    const c = r.roundTripCount;
    if (c) lines.push(`  ${r.label.split(' ')[0]} Redis round trips per run: ${(c.commands / c.runs).toFixed(2)}, of which EVALSHA ${(c.evalsha / c.runs).toFixed(2)}; ${(c.withIdle / c.runs).toFixed(2)} with the idle background (every client command naming the phase's namespace, counted with MONITOR over ${c.runs} more runs)`);
  }
  for (const r of results.filter((x) => x.roundTrips)) {
    lines.push(`  ${r.label.split(' ')[0]} commands per run: ${r.redis.byCommand.map(([cmd, n]) => `${cmd} ${(n / r.runs).toFixed(2)}`).join(', ')}`);
    if (r.stepSec !== undefined && r.execSec !== undefined && r.queueWaitSec !== undefined) {
      lines.push(`  ${r.label.split(' ')[0]} per run: ${((r.execSec * 1000) / r.runs).toFixed(1)} ms executing, of which ${((r.stepSec * 1000) / r.runs).toFixed(1)} ms in the 3 simulator calls; ${((r.queueWaitSec * 1000) / r.runs).toFixed(1)} ms waiting in the dispatcher (permits, slot)${r.lagMs ? `; event-loop delay mean ${r.lagMs.mean.toFixed(1)} ms, p99 ${r.lagMs.p99.toFixed(1)} ms` : ''}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/** A phase of the processor bench: Sluice as `sluice` says, or a BullMQ worker doing `bull`. */
export type BenchPhase = { label: string } & ({ sluice: SluicePhase } | { bull: BullWork });

/** What a bench holds while it runs: the infrastructure, its child processes, a Redis client, a temp dir. */
export interface BenchHarness {
  infra: { kafkaBrokers: string[]; redisUrl: string; databaseUrl: string };
  children: Children;
  redis: Redis;
  dir: string;
  logger: Logger;
}

/**
 * Brings the infrastructure up and runs `body`; afterwards, however it ended, every child is
 * stopped (killed on a signal or an exit) and the temp dir removed.
 */
export async function withBenchHarness<T>(name: string, body: (h: BenchHarness) => Promise<T>): Promise<T> {
  // Stdout carries the figures (a table or one JSON object): the harness's own logs go to stderr.
  const logger = createLogger('warn', 'sluice', pino.destination(2));
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger });
  const children = new Children();
  const killAll = () => children.killAll();
  const onSignal = (signal: NodeJS.Signals) => {
    children.killAll();
    process.stderr.write(`sluice-bench: ${signal}, children killed\n`);
    process.exit(130);
  };
  process.on('exit', killAll);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const dir = mkdtempSync(join(tmpdir(), `sluice-bench-${name}-`));
  const redis = new Redis(infra.redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  try {
    return await body({ infra, children, redis, dir, logger });
  } finally {
    await children.stopAll();
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
    process.off('exit', killAll);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Runs the phases one after another on the same Kafka, Redis and simulator; answers their results. */
export function runProcessorPhases(opts: ProcessorBenchOptions, phases: readonly BenchPhase[]): Promise<PhaseResult[]> {
  return withBenchHarness('processor', async ({ infra, children, redis, dir, logger }) => {
    const simPort = await freePort();
    const simDoc = localConfig();
    simDoc.localInfra = false;
    simDoc.logLevel = 'warn';
    simDoc.simulator = { ...simDoc.simulator, host: '127.0.0.1', port: simPort };
    const sim = children.start('cli/main.js', ['start', '--config', writeYaml(dir, 'sim.yaml', simDoc), '--roles', 'provider-sim'], childEnv({}));
    const simulatorUrl = `http://127.0.0.1:${simPort}`;
    await Promise.race([waitForHttp(`${simulatorUrl}/healthz`, 30_000), children.exited(sim, 'provider simulator')]);
    await zeroLatency(simulatorUrl);

    const ctx: Ctx = { opts, infra, children, redis, simulatorUrl, dir, stamp: Date.now().toString(36), logger, luaInner: luaInnerCommands() };
    const results: PhaseResult[] = [];
    for (const [i, p] of phases.entries()) {
      const r = 'sluice' in p ? await sluicePhase(ctx, p.label, p.sluice, i) : await bullPhase(ctx, p.label, p.bull);
      results.push(r);
      process.stderr.write(`  done: ${r.label}: ${perSec(r).toFixed(1)} runs/s\n`);
    }
    return results;
  });
}

/**
 * `npm run bench processor`: Sluice end to end with its caps enforced (a) and off (b), next to a
 * BullMQ worker doing the same three simulator calls (c) and a no-op BullMQ worker for reference,
 * one phase after another on the same Kafka, Redis and simulator.
 */
export async function benchProcessor(opts: ProcessorBenchOptions): Promise<void> {
  const results = await runProcessorPhases(opts, [
    { label: '(a) sluice, caps enforced', sluice: { enforceCaps: true, roles: 'processor' } },
    { label: '(b) sluice, caps off (enforceCaps=false)', sluice: { enforceCaps: false, roles: 'processor' } },
    { label: '(c) bullmq, same 3 simulator calls', bull: 'http' },
    { label: '(ref) bullmq, no-op (3 awaits)', bull: 'noop' },
  ]);
  process.stdout.write(table(results, opts));
}
