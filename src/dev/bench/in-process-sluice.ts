/**
 * Sluice's real dispatcher and executor in one process, against real Redis and an in-process
 * provider simulator, for the benches that measure its call policies (breaker-bench.ts,
 * pacing-bench.ts). Kafka is left out: the retry topic is modelled by timers.
 */
import { Redis } from 'ioredis';
import { TokenBudgetStore } from '../../admission/token-budget-store.js';
import { BreakerBoard } from '../../breakers/breaker-board.js';
import { BreakerStore } from '../../breakers/breaker-store.js';
import { rampUpShares } from '../../breakers/ramp-up-shares.js';
import { RunBreakerGate } from '../../breakers/run-breaker-gate.js';
import { loadConfig } from '../../config/load.js';
import type { LlmDependencyConfig, SluiceConfig } from '../../config/schema.js';
import { leasesPerRun } from '../../config/workflows.js';
import type { RunRequested } from '../../events/schemas.js';
import type { AttemptContext } from '../../execution/attempt.js';
import { isDegradedResult } from '../../execution/fallback-policy.js';
import { RunExecutor } from '../../execution/run-executor.js';
import { MemoryRunCalls } from '../../execution/run-progress.js';
import { TokenSettlement } from '../../execution/token-settlement.js';
import { createLogger, type Logger } from '../../obs/logger.js';
import { createMetrics } from '../../obs/metrics.js';
import { DependencyPacer } from '../../pacing/dependency-pacer.js';
import { PacingStore } from '../../pacing/pacing-store.js';
import { LeaseKeeper } from '../../permits/lease-keeper.js';
import { PermitStore } from '../../permits/permit-store.js';
import { PermitWakeups } from '../../permits/permit-wakeups.js';
import { RedisDependencyPermits } from '../../permits/run-permits.js';
import { UnlimitedPermits } from '../../permits/unlimited-permits.js';
import { RunDispatcher } from '../../processors/run-dispatcher.js';
import { redisKeys } from '../../redis/keys.js';
import { LuaScripts } from '../../redis/scripts.js';
import { parseRetryFailures } from '../../retries/retry-headers.js';
import { RETRY_BUDGET_REPORT_MS, SharedRetryBudgets } from '../../retries/shared-retry-budget.js';
import { newRunId } from '../../runs/run-id.js';
import { callLlm, createAnthropicClient, type LlmRequest } from '../../steps/llm-call.js';
import { ToolConnections } from '../../steps/tool-connections.js';
import { freePort } from '../../util/free-port.js';
import type { FaultProfile } from '../sim/fault-profile.js';
import { createProviderSim, type ProviderSimStats } from '../sim/provider-sim.js';
import { deleteKeys } from './bench-redis.js';

/** The LLM dependency the benches call. */
export const DEP = 'anthropic';
const ADMIN_KEY = 'local-admin-key';
const ADMIN_SHA = '4ab7b7cd7a009307f975da639ffcb2f104e371d271e936dab005ee993474b81d';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

export interface Sim {
  url: string;
  setFault: (fault: object | null) => Promise<void>;
  /** Starts the simulator's counters afresh (its peak of calls in flight among them). */
  resetStats: () => Promise<void>;
  stats: () => Promise<ProviderSimStats>;
  /** The most calls to the dependency in flight at once since the last reset. */
  maxConcurrent: () => Promise<number>;
  close: () => Promise<void>;
}

/** A provider simulator on a free loopback port; `anthropic` is its baseline for the LLM target (latency, rate limits). */
export async function startSim(anthropic: Partial<FaultProfile>): Promise<Sim> {
  const sim = createProviderSim({ adminKeySha256: ADMIN_SHA, logger: createLogger('silent'), tools: [], defaults: { anthropic } });
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
  const stats = async () => (await (await admin('GET', 'stats')).json()) as ProviderSimStats;
  return {
    url,
    setFault: async (fault) => void (await admin(fault ? 'PUT' : 'DELETE', 'faults', fault ? { target: DEP, ...fault } : undefined)),
    resetStats: async () => void (await admin('POST', 'stats/reset')),
    stats,
    maxConcurrent: async () => (await stats()).maxConcurrent.byTarget[DEP] ?? 0,
    close: () => sim.close(),
  };
}

/** The default configuration in `namespace`, with `one-call`: a workflow of one LLM call, so calls per run are exactly one when nothing fails. */
export function oneCallConfig(namespace: string): SluiceConfig {
  const config = loadConfig({ env: {} });
  config.namespace = namespace;
  config.workflows['one-call'] = {
    description: 'one LLM call, so calls per run are exactly one when nothing fails',
    defaultClass: 'interactive',
    maxConcurrency: 1_000,
    steps: [{ id: 'answer', kind: 'llm', dependency: DEP, system: 'Answer briefly.' }],
    fallback: { text: 'The assistant is unavailable right now.' },
  };
  return config;
}

/** One bare LLM call to the benches' dependency, for the callers that bypass the executor. */
export function llmRequest(config: SluiceConfig, tenantId: string, timeoutMs: number): LlmRequest {
  return { dependency: DEP, config: config.dependencies[DEP] as LlmDependencyConfig, system: 's', messages: [{ role: 'user', content: 'u' }], tenantId, timeoutMs, headers: {} };
}

/** A run of `one-call` as admission would produce it, admitted now. */
export function oneCallRun(tenantId: string, runClass: RunRequested['class'], deadlineMs: number): RunRequested {
  const now = Date.now();
  return { runId: newRunId(), tenantId, workflow: 'one-call', class: runClass, admittedAt: now, deadline: now + deadlineMs, attempt: 1, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', input: '{}', idempotencyKey: null, dueAt: null };
}

/**
 * Which dependency permits a run takes around each call: `none` (no cap), `cap` (the
 * dependency's concurrency cap from Redis, whole at once after a close) or `ramp` (the same cap
 * with `breaker.rampUp`, as config/local.yaml sets it).
 */
export type DependencyCap = 'none' | 'cap' | 'ramp';

/** Real dependency permits from Redis, as a processor with caps enforced takes them. */
async function dependencyPermits(config: SluiceConfig, redis: Redis, board: BreakerBoard, logger: Logger, metrics: ReturnType<typeof createMetrics>) {
  const keys = redisKeys(config.namespace);
  const wakeups = new PermitWakeups(redis, { channel: keys.permitReleased(), logger });
  await wakeups.start();
  const store = new PermitStore(new LuaScripts(redis), keys);
  const keeper = new LeaseKeeper(store, { ttlMs: config.processor.permitLeaseMs, maxLeases: config.processor.maxInFlight * leasesPerRun(config.workflows), logger });
  const permits = new RedisDependencyPermits({ config, keys, store, keeper, wakeups, metrics, logger }, rampUpShares(config, board));
  return {
    acquire: (dependency: string, run: RunRequested) => permits.acquire(dependency, run),
    close: async () => {
      keeper.stop();
      await wakeups.close();
    },
  };
}

/** A run that ended (not retried): its outcome, `completed degraded (fallback)` for a stand-in answer, and when. */
export interface FinishedRun {
  run: RunRequested;
  outcome: string;
  at: number;
}

/** The input+output tokens an answered LLM call used, as the provider's answer reports them. */
export interface TokenUse {
  at: number;
  tenantId: string;
  tokens: number;
}

export interface InProcessResult {
  /** When each call to the dependency went out, and when each that succeeded came back. */
  calls: number[];
  successes: number[];
  usage: TokenUse[];
  outcomes: Map<string, number>;
  finished: FinishedRun[];
  /** Runs that had not ended when the drain timeout passed. */
  unfinished: number;
  /** Times this instance saw the dependency's breaker open. */
  breakerOpenings: number;
}

export interface InProcessOptions {
  config: SluiceConfig;
  cap: DependencyCap;
  redisUrl: string;
  simUrl: string;
  runs: () => AsyncGenerator<RunRequested>;
  /** How long runs may take to end after the last arrival. */
  drainTimeoutMs: number;
  /** Called when a run ends (not when it is retried), as the status sink hears of it in production. */
  onEnded?: (run: RunRequested) => Promise<void>;
}

/**
 * Sluice's policy, by the real dispatcher and executor against a real shared breaker: runs that
 * need an open dependency are held, only probes start while half-open, step retries use full
 * jitter inside the retry budget, calls are paced by the shared rate limits when
 * `processor.pacing.enabled`, run-level retries, breaker waits and deferred turns are re-enqueued
 * (the retry topic is modelled by a timer here: the benches measure the policy, not Kafka), and a
 * run that cannot wait gets its fallback. Runs' tokens are settled with their tenants' token
 * budgets as a processor settles them (nothing to do when no tenant has one). At most `processor.maxInFlight` runs at once, as in one
 * processor; no run caps, and the dependency's cap as `cap` says. Deletes the namespace's keys after.
 */
export async function runInProcess(opts: InProcessOptions): Promise<InProcessResult> {
  const { config, cap } = opts;
  const redis = new Redis(opts.redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  const keys = redisKeys(config.namespace);
  const logger = createLogger('silent');
  const metrics = createMetrics();
  const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
  await board.start();
  if (cap !== 'ramp') delete config.dependencies[DEP]!.breaker.rampUp;
  const permits = cap === 'none' ? undefined : await dependencyPermits(config, redis, board, logger, metrics);
  const pacer = config.processor.pacing.enabled ? new DependencyPacer({ store: new PacingStore(new LuaScripts(redis), keys), config, metrics, now: Date.now, rampShare: rampUpShares(config, board) }) : undefined;
  const result: InProcessResult = { calls: [], successes: [], usage: [], outcomes: new Map(), finished: [], unfinished: 0, breakerOpenings: 0 };
  board.onChange((next, previous) => {
    if (next.state === 'open' && previous.state !== 'open') result.breakerOpenings++;
  });
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: opts.simUrl });
  const record = { topic: 'bench', partition: 0, message: { offset: '0', key: null, value: null } };
  const journal = new Map<string, Map<string, unknown>>();
  const runCalls = new MemoryRunCalls();
  const degraded = new Set<string>();
  const timers = new Set<NodeJS.Timeout>();
  let unfinished = 0;
  let dispatcher: RunDispatcher | undefined;
  const submit = (run: RunRequested, context: AttemptContext) => dispatcher!.submit({ run, source: 'bench', offset: 0, context });
  const retryBudgets = new SharedRetryBudgets({ scripts: new LuaScripts(redis), keys, reportEveryMs: RETRY_BUDGET_REPORT_MS, metrics, logger });
  retryBudgets.start();
  const tools = new ToolConnections();
  const executor = new RunExecutor({
    config,
    retryBudgets,
    llm: async (req) => {
      result.calls.push(Date.now());
      const answer = await callLlm(client, req);
      const at = Date.now();
      result.successes.push(at);
      result.usage.push({ at, tenantId: req.tenantId, tokens: answer.usage.inputTokens + answer.usage.outputTokens });
      return answer;
    },
    tool: (req) => tools.call(req),
    simulatorUrl: opts.simUrl,
    publishStatus: async (e) => {
      if (e.status === 'completed' && isDegradedResult(e.result)) degraded.add(e.runId);
    },
    dependencyPermits: permits ?? { acquire: async () => async () => undefined },
    ...(pacer && { pacer }),
    progress: {
      open: async (runId) => ({ done: journal.get(runId) ?? new Map(), cancelled: undefined }),
      record: async (runId, step, output) => void journal.set(runId, (journal.get(runId) ?? new Map()).set(step, output)),
      cancelReason: async () => undefined,
      addCalls: (runId, calls) => runCalls.addCalls(runId, calls),
      end: (run, calls) => runCalls.end(run, calls),
    },
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
    tokenSettlement: new TokenSettlement(config, new TokenBudgetStore(new LuaScripts(redis), keys), logger),
  });
  dispatcher = new RunDispatcher({
    permits: new UnlimitedPermits(),
    execute: async (run, task) => {
      const outcome = await executor.execute(run, task.context);
      if (outcome === 'retried') return;
      unfinished--;
      const label = outcome === 'completed' && degraded.has(run.runId) ? 'completed degraded (fallback)' : outcome;
      bump(result.outcomes, label);
      result.finished.push({ run, outcome: label, at: Date.now() });
      await opts.onEnded?.(run);
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
  for await (const run of opts.runs()) {
    unfinished++;
    submit(run, { priorFailures: 0, record });
  }
  const until = Date.now() + opts.drainTimeoutMs;
  while (unfinished > 0 && Date.now() < until) await sleep(100);
  result.unfinished = unfinished;
  for (const t of timers) clearTimeout(t);
  await dispatcher.stop(5_000);
  await retryBudgets.stop();
  tools.close();
  await permits?.close();
  await board.close();
  await deleteKeys(redis, `${config.namespace}*`);
  await redis.quit();
  return result;
}
