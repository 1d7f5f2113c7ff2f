import { once } from 'node:events';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { SCRIPTS, type ScriptName, scriptSource } from '../../redis/scripts.js';
import { withTimeout } from '../../util/with-timeout.js';
import { childEnv, withBenchHarness, type BenchHarness, scrape } from './bench-harness.js';
import type { BullJobData, BullWork, WatchMessage, WorkerMessage } from './bullmq-worker.js';
import { simAdmin } from './sim-admin.js';
import { promSum } from './sizing-figures.js';
import { runRequest, sluiceConfigDoc, startSimulator, withSluiceProcess } from './sluice-process.js';

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

const WORKFLOW = 'support-reply';
/** Idle window (per phase, just before measuring) whose Redis calls are scaled and subtracted. */
const IDLE_BASELINE_MS = 1_000;
const WARMUP_TIMEOUT_MS = 90_000;
/** Runs of the window after a Sluice phase whose Redis commands are counted one by one (MONITOR slows Redis, so not while measuring). */
const COUNTED_RUNS = 100;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

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

interface SimWindow {
  calls: number;
  errors: number;
}

async function simWindow(simulatorUrl: string): Promise<SimWindow> {
  const s = (await simAdmin(simulatorUrl, 'GET', '/stats')) as { calls: Record<string, number>; errors: Record<string, number> };
  const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
  return { calls: sum(s.calls), errors: sum(s.errors) };
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

interface Ctx extends BenchHarness {
  opts: ProcessorBenchOptions;
  simulatorUrl: string;
  stamp: string;
  luaInner: Set<string>;
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
function sluicePhase(ctx: Ctx, label: string, phase: SluicePhase, index: number): Promise<PhaseResult> {
  const { opts } = ctx;
  const spec = {
    label,
    index,
    stamp: ctx.stamp,
    roles: phase.roles,
    config: (o: { registryDir: string; opsPort: number }) => ({ ...sluiceConfigDoc({ ...o, simulatorUrl: ctx.simulatorUrl, concurrency: opts.concurrency, enforceCaps: phase.enforceCaps }), ...phase.config }),
    maxPending: opts.runs + opts.warmup + 1_000,
    cpuProfDir: opts.cpuProfDir,
  };
  return withSluiceProcess(ctx, spec, async (p) => {
    // Warm-up: the processor joins its group and reads from the beginning, so these wait for it.
    await p.runAll(Array.from({ length: opts.warmup }, (_, i) => runRequest(WORKFLOW, i)), WARMUP_TIMEOUT_MS, 'warm-up');

    await simAdmin(ctx.simulatorUrl, 'POST', '/stats/reset');
    const runs = Array.from({ length: opts.runs }, (_, i) => runRequest(WORKFLOW, i));
    // Scraped outside the Redis window: a scrape reads permit gauges from Redis.
    const before = await scrape(p.metricsUrl);
    const m = await measureRedis(ctx, async () => {
      const t = await p.runAll(runs, opts.phaseTimeoutSec * 1000, 'measured runs');
      return { submitSec: (t.submittedAt - t.startedAt) / 1000, totalSec: (t.finishedAt - t.startedAt) / 1000 };
    });
    const after = await scrape(p.metricsUrl);
    const sim = await simWindow(ctx.simulatorUrl);
    const counted = Array.from({ length: COUNTED_RUNS }, (_, i) => runRequest(WORKFLOW, i));
    const roundTripCount = await countRoundTrips(ctx.redis, p.namespace, counted.length, async () => {
      await p.runAll(counted, opts.phaseTimeoutSec * 1000, 'counted runs');
    });
    const diff = (name: string) => (after && before ? promSum(after, name) - promSum(before, name) : undefined);
    return {
      label,
      runs: opts.runs,
      submitSec: m.value.submitSec,
      totalSec: m.value.totalSec,
      outcomes: p.tally(runs.map((r) => r.runId)),
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
  });
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
      const r = runRequest(WORKFLOW, i);
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

/** Runs the phases one after another on the same Kafka, Redis and simulator; answers their results. */
export function runProcessorPhases(opts: ProcessorBenchOptions, phases: readonly BenchPhase[]): Promise<PhaseResult[]> {
  return withBenchHarness('processor', async (h) => {
    const simulatorUrl = await startSimulator(h);
    const ctx: Ctx = { ...h, opts, simulatorUrl, stamp: Date.now().toString(36), luaInner: luaInnerCommands() };
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
