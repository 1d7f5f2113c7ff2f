import { Redis } from 'ioredis';
import { BreakerBoard } from '../../breakers/breaker-board.js';
import { BreakerStore } from '../../breakers/breaker-store.js';
import { loadConfig } from '../../config/load.js';
import type { LlmDependencyConfig, SluiceConfig } from '../../config/schema.js';
import type { RunRequested } from '../../events/schemas.js';
import { infraUp } from '../infra/local-infra.js';
import { createLogger, type Logger } from '../../obs/logger.js';
import { createMetrics } from '../../obs/metrics.js';
import { parseRetryFailures } from '../../retries/retry-headers.js';
import type { AttemptContext } from '../../execution/attempt.js';
import { RunExecutor } from '../../execution/run-executor.js';
import { RunDispatcher } from '../../processors/run-dispatcher.js';
import { UnlimitedPermits } from '../../permits/unlimited-permits.js';
import { LeaseKeeper } from '../../permits/lease-keeper.js';
import { PermitStore } from '../../permits/permit-store.js';
import { PermitWakeups } from '../../permits/permit-wakeups.js';
import { RedisDependencyPermits } from '../../permits/run-permits.js';
import { RunBreakerGate } from '../../breakers/run-breaker-gate.js';
import { rampUpShares } from '../../breakers/ramp-up-shares.js';
import { callLlm, createAnthropicClient, type LlmRequest } from '../../steps/llm-call.js';
import { StepError } from '../../steps/step-error.js';
import { redisKeys } from '../../redis/keys.js';
import { RETRY_BUDGET_REPORT_MS, SharedRetryBudgets } from '../../retries/shared-retry-budget.js';
import { LuaScripts } from '../../redis/scripts.js';
import { newRunId } from '../../runs/run-id.js';
import { createProviderSim, type ProviderSimStats } from '../sim/provider-sim.js';
import { freePort } from '../../util/free-port.js';
import { deleteKeys } from './bench-redis.js';

export interface BreakerBenchOptions {
  /** Propagation trials per mode (shared breaker, per-instance breakers). */
  trials: number;
  /** Breaker-holding instances in the propagation trials. */
  instances: number;
  /** Offered runs per second in the amplification phase. */
  rate: number;
  /** Seconds of arrivals in the amplification phase; the fault covers its first `faultSec`. */
  durationSec: number;
  faultSec: number;
  /** Multiplies every duration of the amplification phase (delays, open time, deadline, fault). */
  scale: number;
}

const ADMIN_KEY = 'local-admin-key';
const ADMIN_SHA = '4ab7b7cd7a009307f975da639ffcb2f104e371d271e936dab005ee993474b81d';
const DEP = 'anthropic';
/** A naive client, as teams without Sluice run it: retry after 1, 2, 4 and 8 s, whatever the error. */
const NAIVE_DELAYS_SEC = [1, 2, 4, 8];
const CALLERS_PER_INSTANCE = 2;
const TRIAL_TIMEOUT_MS = 10_000;
const DRAIN_TIMEOUT_MS = 120_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const percentile = (sorted: readonly number[], p: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!);

interface Sim {
  url: string;
  setFault: (fault: object | null) => Promise<void>;
  /** Starts the simulator's counters afresh (its peak of calls in flight among them). */
  resetStats: () => Promise<void>;
  /** The most calls to the dependency in flight at once since the last reset. */
  maxConcurrent: () => Promise<number>;
  close: () => Promise<void>;
}

async function startSim(latencyMs: number): Promise<Sim> {
  const sim = createProviderSim({ adminKeySha256: ADMIN_SHA, logger: createLogger('silent'), tools: [], defaults: { anthropic: { latencyMs, jitterMs: 5 } } });
  const port = await freePort();
  await sim.listen({ host: '127.0.0.1', port });
  const url = `http://127.0.0.1:${port}`;
  const admin = async (method: string, path: string, body?: object) => {
    const res = await fetch(`${url}/admin/${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(5_000),
    });
    if (!res.ok) throw new Error(`simulator refused ${method} /admin/${path}: HTTP ${res.status}`);
    return res;
  };
  return {
    url,
    setFault: async (fault) => void (await admin(fault ? 'PUT' : 'DELETE', 'faults', fault ? { target: DEP, ...fault } : undefined)),
    resetStats: async () => void (await admin('POST', 'stats/reset')),
    maxConcurrent: async () => ((await (await admin('GET', 'stats')).json()) as ProviderSimStats).maxConcurrent.byTarget[DEP] ?? 0,
    close: () => sim.close(),
  };
}

function benchConfig(namespace: string, scale: number): SluiceConfig {
  const config = loadConfig({ env: {} });
  config.namespace = namespace;
  const dep = config.dependencies[DEP]!;
  dep.timeouts = { connectMs: 3_000, readMs: 10_000, totalMs: 10_000 };
  dep.breaker.openMs = Math.round(5_000 * scale);
  if (dep.breaker.rampUp) dep.breaker.rampUp = { ...dep.breaker.rampUp, intervalMs: Math.max(100, Math.round(dep.breaker.rampUp.intervalMs * scale)) };
  dep.retry = { ...dep.retry, baseMs: Math.round(500 * scale), capMs: Math.round(2_000 * scale) };
  config.processor.runRetry = { maxAttempts: 3, baseMs: Math.round(1_000 * scale), capMs: Math.round(30_000 * scale) };
  config.workflows['one-call'] = {
    description: 'one LLM call, so calls per run are exactly one when nothing fails',
    defaultClass: 'interactive',
    maxConcurrency: 1_000,
    steps: [{ id: 'answer', kind: 'llm', dependency: DEP, system: 'Answer briefly.' }],
    fallback: { text: 'The assistant is unavailable right now.' },
  };
  return config;
}

/** One bare LLM call to the bench's dependency, for the callers that bypass the executor. */
function llmRequest(config: SluiceConfig, tenantId: string, timeoutMs: number): LlmRequest {
  return { dependency: DEP, config: config.dependencies[DEP] as LlmDependencyConfig, system: 's', userContent: 'u', tenantId, timeoutMs, headers: {} };
}

// ---------------------------------------------------------------------------------------------
// Part 1: from the first failing call to every instance holding back, shared vs per-instance.

interface Instance {
  redis: Redis;
  store: BreakerStore;
  board: BreakerBoard;
}

/** One trial; resolves to ms from the first failed call until every instance stopped calling. */
async function propagationTrial(mode: 'shared' | 'local', instances: Instance[], config: SluiceConfig, simUrl: string): Promise<number> {
  const policy = config.dependencies[DEP]!.breaker;
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: simUrl });
  const request = llmRequest(config, 'bench', 5_000);
  let firstFailure: number | undefined;
  const stoppedAt: (number | undefined)[] = instances.map(() => undefined);
  const localFailures = instances.map(() => 0);
  const unsubscribe = instances.map((inst, i) =>
    inst.board.onChange((next) => {
      if (mode === 'shared' && next.state === 'open') stoppedAt[i] ??= Date.now();
    }),
  );
  const deadline = Date.now() + TRIAL_TIMEOUT_MS;
  let seq = 0;
  const caller = async (i: number) => {
    const inst = instances[i]!;
    while (stoppedAt[i] === undefined && Date.now() < deadline) {
      const token = `trial:${i}:${seq++}`;
      if (mode === 'shared' && !(await inst.store.admit(DEP, token)).allowed) return;
      const started = Date.now();
      try {
        await callLlm(client, request);
        if (mode === 'shared') await inst.store.record(DEP, undefined, 'success', Date.now() - started);
      } catch (err) {
        if (!(err instanceof StepError)) throw err;
        firstFailure ??= Date.now();
        if (mode === 'shared') await inst.store.record(DEP, undefined, 'failure', Date.now() - started);
        else if (++localFailures[i]! >= policy.failureThreshold) stoppedAt[i] ??= Date.now();
      }
    }
  };
  await Promise.all(instances.flatMap((_, i) => Array.from({ length: CALLERS_PER_INSTANCE }, () => caller(i))));
  // The last instance may learn of the trip after its callers already returned on a refusal.
  while (mode === 'shared' && stoppedAt.some((t) => t === undefined) && Date.now() < deadline) await sleep(1);
  for (const u of unsubscribe) u();
  if (firstFailure === undefined || stoppedAt.some((t) => t === undefined)) throw new Error(`${mode} trial: not every instance stopped within ${TRIAL_TIMEOUT_MS} ms`);
  return Math.max(...(stoppedAt as number[])) - firstFailure;
}

async function benchPropagation(opts: BreakerBenchOptions, redisUrl: string, simUrl: string, setFault: (f: object | null) => Promise<void>): Promise<void> {
  const namespace = `bench-breaker-${Date.now()}-`;
  const keys = redisKeys(namespace);
  const config = benchConfig(namespace, 1);
  const logger = createLogger('silent');
  const instances: Instance[] = [];
  for (let i = 0; i < opts.instances; i++) {
    const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
    const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
    await board.start();
    instances.push({ redis, store: new BreakerStore(new LuaScripts(redis), keys, (d) => config.dependencies[d]?.breaker), board });
  }
  await setFault({ errorStatus: 429, errorRate: 1, retryAfterSec: 1 });
  const results = { shared: [] as number[], local: [] as number[] };
  try {
    for (let t = 0; t < opts.trials; t++) {
      for (const mode of ['shared', 'local'] as const) {
        await deleteKeys(instances[0]!.redis, `${namespace}*`);
        // Every board must see the reset (closed) before the next trial starts: a read already in
        // flight may predate the reset, so read once more after it.
        for (let r = 0; r < 2; r++) await Promise.all(instances.map((i) => i.board.refresh()));
        results[mode].push(await propagationTrial(mode, instances, config, simUrl));
      }
    }
  } finally {
    await setFault(null);
    await deleteKeys(instances[0]!.redis, `${namespace}*`);
    for (const i of instances) {
      await i.board.close();
      await i.redis.quit();
    }
  }
  const line = (label: string, xs: number[], base?: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const b = base ? [...base].sort((a, c) => a - c) : undefined;
    const ratio = b ? `${(percentile(s, 50) / percentile(b, 50)).toFixed(2)}x ${(percentile(s, 99) / percentile(b, 99)).toFixed(2)}x` : '    -     -';
    return `  ${label.padEnd(44)} ${percentile(s, 50).toFixed(1).padStart(7)} ${percentile(s, 99).toFixed(1).padStart(7)} ${s.at(-1)!.toFixed(1).padStart(7)}   ${ratio}`;
  };
  process.stdout.write(
    `\nfirst failing call -> every instance stops calling (${opts.instances} instances x ${CALLERS_PER_INSTANCE} callers, 429 on every call, ${opts.trials} trials each, ms)\n` +
      `  ${'mode'.padEnd(44)}     p50     p99     max   ratio p50/p99 vs baseline\n` +
      `${line('per-instance breakers (baseline)', results.local)}\n` +
      `${line('shared breaker (Redis Lua + pub/sub)', results.shared, results.local)}\n`,
  );
}

// ---------------------------------------------------------------------------------------------
// Part 2: calls per offered run during a provider 429 storm, naive retries vs Sluice's policy.

interface ModeResult {
  calls: number[];
  outcomes: Map<string, number>;
  /** The most calls in flight at once at the provider after the fault. */
  maxConcurrentAfter?: number;
}

const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

/** The naive client: every failure is retried after 1, 2, 4, 8 s, no breaker, no budget. */
async function naiveRun(client: ReturnType<typeof createAnthropicClient>, req: LlmRequest, scale: number, calls: number[], outcomes: Map<string, number>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    calls.push(Date.now());
    try {
      await callLlm(client, req);
      bump(outcomes, 'completed');
      return;
    } catch (err) {
      if (!(err instanceof StepError)) throw err;
      const delay = NAIVE_DELAYS_SEC[attempt];
      if (delay === undefined) {
        bump(outcomes, 'failed after 5 attempts');
        return;
      }
      await sleep(delay * 1_000 * scale);
    }
  }
}

/**
 * Which dependency permits a Sluice mode takes around each call: `none` (no cap: the retry
 * policy's figures alone), `cap` (the dependency's concurrency cap from Redis, whole at once after
 * a close) or `ramp` (the same cap with `breaker.rampUp`, as config/local.yaml sets it).
 */
type DependencyCap = 'none' | 'cap' | 'ramp';

/** Real dependency permits from Redis, as a processor with caps enforced takes them. */
async function dependencyPermits(config: SluiceConfig, redis: Redis, board: BreakerBoard, logger: Logger, metrics: ReturnType<typeof createMetrics>) {
  const keys = redisKeys(config.namespace);
  const wakeups = new PermitWakeups(redis, { channel: keys.permitReleased(), logger });
  await wakeups.start();
  const store = new PermitStore(new LuaScripts(redis), keys);
  const keeper = new LeaseKeeper(store, { ttlMs: config.processor.permitLeaseMs, maxLeases: config.processor.maxInFlight * 2, logger });
  const permits = new RedisDependencyPermits({ config, keys, store, keeper, wakeups, metrics, logger }, rampUpShares(config, board));
  return {
    acquire: (dependency: string, run: RunRequested) => permits.acquire(dependency, run),
    close: async () => {
      keeper.stop();
      await wakeups.close();
    },
  };
}

/**
 * Sluice's policy, by the real dispatcher and executor against a real shared breaker: runs that
 * need an open dependency are held, only probes start while half-open, step retries use full
 * jitter inside the retry budget, run-level retries and breaker waits are re-enqueued (the retry
 * topic is modelled by a timer here: the bench measures the policy, not Kafka), and a run that
 * cannot wait gets its fallback. At most `processor.maxInFlight` runs at once, as in one processor;
 * no run caps, and the dependency's cap as `cap` says.
 */
async function sluiceMode(config: SluiceConfig, cap: DependencyCap, redisUrl: string, simUrl: string, runs: () => AsyncGenerator<RunRequested>, calls: number[]): Promise<ModeResult> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  const keys = redisKeys(config.namespace);
  const logger = createLogger('silent');
  const metrics = createMetrics();
  const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
  await board.start();
  if (cap !== 'ramp') delete config.dependencies[DEP]!.breaker.rampUp;
  const permits = cap === 'none' ? undefined : await dependencyPermits(config, redis, board, logger, metrics);
  const outcomes = new Map<string, number>();
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: simUrl });
  const record = { topic: 'bench', partition: 0, message: { offset: '0', key: null, value: null } };
  const journal = new Map<string, unknown>();
  const degraded = new Set<string>();
  const timers = new Set<NodeJS.Timeout>();
  let unfinished = 0;
  let dispatcher: RunDispatcher | undefined;
  const submit = (run: RunRequested, context: AttemptContext) => dispatcher!.submit({ run, source: 'bench', offset: 0, context });
  const retryBudgets = new SharedRetryBudgets({ scripts: new LuaScripts(redis), keys, reportEveryMs: RETRY_BUDGET_REPORT_MS, metrics, logger });
  retryBudgets.start();
  const executor = new RunExecutor({
    config,
    retryBudgets,
    llm: (req) => {
      calls.push(Date.now());
      return callLlm(client, req);
    },
    simulatorUrl: simUrl,
    publishStatus: async (e) => {
      if (e.status === 'completed' && e.result && (JSON.parse(e.result) as { degraded?: boolean }).degraded) degraded.add(e.runId);
    },
    cancellation: { cancelReason: async () => undefined },
    dependencyPermits: permits ?? { acquire: async () => async () => undefined },
    journal: { recall: async (runId, step) => (journal.has(`${runId}:${step}`) ? { output: journal.get(`${runId}:${step}`) } : undefined), record: async (runId, step, output) => void journal.set(`${runId}:${step}`, output) },
    breakers: new BreakerStore(new LuaScripts(redis), keys, (d) => config.dependencies[d]?.breaker),
    board,
    enqueueRetry: async (run, headers) => {
      const context: AttemptContext = { priorFailures: parseRetryFailures(Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)]))), record };
      const timer = setTimeout(() => {
        timers.delete(timer);
        submit(run, context);
      }, Math.max(0, (run.dueAt ?? 0) - Date.now()));
      timers.add(timer);
    },
    deadLetters: { publishDeadLetter: async () => undefined },
    metrics,
    logger,
  });
  dispatcher = new RunDispatcher({
    permits: new UnlimitedPermits(),
    execute: async (run, task) => {
      const outcome = await executor.execute(run, task.context);
      if (outcome === 'retried') return;
      unfinished--;
      bump(outcomes, outcome === 'completed' && degraded.has(run.runId) ? 'completed degraded (fallback)' : outcome);
    },
    onFinished: () => undefined,
    deadLetter: (task, failure) => executor.deadLetter(task.run, task.context, failure),
    infraRetry: config.processor.infraRetry,
    maxInFlight: config.processor.maxInFlight,
    breakers: new RunBreakerGate(config, board),
    fallbackPollMs: 500,
    logger,
    metrics,
  });
  for await (const run of runs()) {
    unfinished++;
    submit(run, { priorFailures: 0, record });
  }
  const until = Date.now() + DRAIN_TIMEOUT_MS;
  while (unfinished > 0 && Date.now() < until) await sleep(100);
  for (const t of timers) clearTimeout(t);
  await dispatcher.stop(5_000);
  await retryBudgets.stop();
  await permits?.close();
  await board.close();
  await deleteKeys(redis, `${config.namespace}*`);
  await redis.quit();
  return { calls, outcomes };
}

async function benchAmplification(opts: BreakerBenchOptions, redisUrl: string): Promise<void> {
  const sims = [await startSim(50), await startSim(50), await startSim(50), await startSim(50)];
  const [naiveSim, ...sluiceSims] = sims as [Sim, Sim, Sim, Sim];
  const config = benchConfig(`bench-amplify-${Date.now()}-`, opts.scale);
  const total = Math.round(opts.rate * opts.durationSec);
  const deadlineMs = Math.round(30_000 * opts.scale);
  const gapMs = 1_000 / opts.rate;
  const started = Date.now();
  const faultEnds = started + opts.faultSec * 1_000 * opts.scale;
  // Open loop: runs arrive on schedule whatever happens to earlier ones.
  async function* arrivals(): AsyncGenerator<RunRequested> {
    for (let i = 0; i < total; i++) {
      await sleep(Math.max(0, started + i * gapMs * opts.scale - Date.now()));
      const now = Date.now();
      yield { runId: newRunId(), tenantId: 'tenant-a', workflow: 'one-call', class: 'interactive', admittedAt: now, deadline: now + deadlineMs, attempt: 1, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', input: '{}', idempotencyKey: null, dueAt: null };
    }
  }
  await Promise.all(sims.map((s) => s.setFault({ errorStatus: 429, errorRate: 1, retryAfterSec: 1 })));
  // From the end of the fault on, each simulator counts its peak of calls in flight afresh.
  const lift = sleep(faultEnds - Date.now()).then(() => Promise.all(sims.map(async (s) => (await s.setFault(null), await s.resetStats()))));
  const naive: ModeResult = { calls: [], outcomes: new Map() };
  const naiveClient = createAnthropicClient({ apiKey: undefined, baseUrl: naiveSim.url });
  const naiveReq = llmRequest(config, 'tenant-a', 10_000);
  const naiveDone = (async () => {
    const runs: Promise<void>[] = [];
    for await (const _ of arrivals()) runs.push(naiveRun(naiveClient, naiveReq, opts.scale, naive.calls, naive.outcomes));
    await Promise.all(runs);
  })();
  const caps: DependencyCap[] = ['none', 'cap', 'ramp'];
  // Each mode its own namespace, so their breakers and permits are apart.
  const [uncapped, capped, ramped] = (await Promise.all(caps.map((cap, i) => sluiceMode(benchConfig(`${config.namespace}${cap}-`, opts.scale), cap, redisUrl, sluiceSims[i]!.url, arrivals, [])))) as [ModeResult, ModeResult, ModeResult];
  await naiveDone;
  await lift;
  const [naivePeak, ...sluicePeaks] = await Promise.all(sims.map((s) => s.maxConcurrent()));
  naive.maxConcurrentAfter = naivePeak;
  [uncapped, capped, ramped].forEach((r, i) => (r.maxConcurrentAfter = sluicePeaks[i]));
  await Promise.all(sims.map((s) => s.close()));

  const faultMs = opts.faultSec * 1_000 * opts.scale;
  const describe = (label: string, r: ModeResult, base?: ModeResult) => {
    const during = r.calls.filter((t) => t < faultEnds).length;
    const after = r.calls.length - during;
    // The busiest (scaled) second after the fault, against the runs offered in one: a wave shows as > 1.
    const windowMs = 1_000 * opts.scale;
    let peak = 0;
    for (const t of r.calls) if (t >= faultEnds) peak = Math.max(peak, r.calls.filter((u) => u >= t && u < t + windowMs).length);
    const amp = r.calls.length / total;
    const ratio = base ? `${(amp / (base.calls.length / total)).toFixed(2)}x` : '    -';
    // From the end of the fault to the last call: how long the backlog took to reach the provider.
    const drainSec = after === 0 ? 0 : (Math.max(...r.calls) - faultEnds) / 1_000;
    const outcomes = [...r.outcomes].map(([k, n]) => `${k}: ${n}`).join(', ');
    return `  ${label.padEnd(40)} ${String(r.calls.length).padStart(6)} ${amp.toFixed(2).padStart(7)} ${String(during).padStart(8)} ${String(after).padStart(7)} ${(peak / opts.rate).toFixed(2).padStart(9)}x ${drainSec.toFixed(1).padStart(7)} ${String(r.maxConcurrentAfter ?? '-').padStart(8)}  ${ratio.padStart(7)}   ${outcomes}`;
  };
  const ramp = config.dependencies[DEP]!.breaker.rampUp;
  process.stdout.write(
    `\ncall amplification: ${total} runs offered at ${opts.rate}/s (time x${opts.scale}), every LLM call answered 429 for the first ${(faultMs / 1000).toFixed(1)} s, one LLM call per run when healthy\n` +
      `  ${'policy'.padEnd(40)}  calls per-run in-fault   after  peak-after drain-s in-flight  vs base   outcomes\n` +
      `${describe('naive 1/2/4/8 s retries (baseline)', naive)}\n` +
      `${describe('Sluice (breaker + budget + jitter)', uncapped, naive)}\n` +
      `${describe(`  + dependency cap ${config.dependencies[DEP]!.maxConcurrency}`, capped, naive)}\n` +
      `${describe(`  + cap ${config.dependencies[DEP]!.maxConcurrency}, slow start`, ramped, naive)}\n` +
      `  (peak-after: the most calls in one ${opts.scale} s window after the fault, as a multiple of the runs offered per window;\n` +
      `   drain-s: seconds from the end of the fault to the last call; in-flight: the most calls at once at the provider after the fault; slow start: ${ramp ? `${ramp.initialFraction} of the cap, +${ramp.stepFraction} every ${ramp.intervalMs} ms` : 'none configured'})\n`,
  );
}

export async function benchBreaker(opts: BreakerBenchOptions): Promise<void> {
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger: createLogger('warn') });
  const sim = await startSim(20);
  try {
    await benchPropagation(opts, infra.redisUrl, sim.url, sim.setFault);
  } finally {
    await sim.close();
  }
  await benchAmplification(opts, infra.redisUrl);
}
