import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { RUN_CLASSES, type Role, type SluiceConfig } from '../config/schema.js';
import { createAuditLogger, type Logger } from '../obs/logger.js';
import { createMetrics, type Metrics } from '../obs/metrics.js';
import { buildApiServer } from '../api/server.js';
import { registerHealthRoutes } from '../api/routes/health.js';
import { createProviderSim } from '../dev/index.js';
import { RunStore } from '../status/run-store.js';
import { AdmissionRows, type RunReads } from '../status/admission-rows.js';
import { StatusSink } from '../status/status-sink.js';
import { RunConsumer } from '../processors/run-consumer.js';
import { unpricedModels } from '../steps/llm-pricing.js';
import { RunExecutor } from '../execution/run-executor.js';
import { RedisCancellations } from '../runs/cancellation.js';
import { RedisRunProgress } from '../execution/run-progress.js';
import { TokenSettlement } from '../execution/token-settlement.js';
import { RunEventFeed } from '../status/run-event-feed.js';
import { createListenClient } from '../db/pool.js';
import { callLlm, createAnthropicClient } from '../steps/llm-call.js';
import { ToolConnections } from '../steps/tool-connections.js';
import { SharedClients } from './shared-clients.js';
import { AdmissionController } from '../admission/admission-controller.js';
import { AdmissionStore } from '../admission/admission-store.js';
import { BucketRefusalMemo } from '../admission/bucket-refusal-memo.js';
import { releaseFinishedRun } from '../admission/backlog-release.js';
import { ReadLimits } from '../admission/read-limits.js';
import { IdempotencyStore } from '../admission/idempotency.js';
import { ServiceState } from '../admission/service-state.js';
import { TokenBudgetStore } from '../admission/token-budget-store.js';
import { RedisOutageFallback } from '../admission/redis-outage.js';
import { LeaseKeeper } from '../permits/lease-keeper.js';
import { LimitsStore } from '../permits/limits-store.js';
import { PermitStore } from '../permits/permit-store.js';
import { DependencyPacer } from '../pacing/dependency-pacer.js';
import { PacingStore } from '../pacing/pacing-store.js';
import { FairShareBoard } from '../pacing/fair-share-board.js';
import { PermitWakeups } from '../permits/permit-wakeups.js';
import { AdaptiveLimitStore } from '../permits/adaptive-limit-store.js';
import { RedisDependencyPermits, RedisRunPermits } from '../permits/run-permits.js';
import { UnlimitedPermits } from '../permits/unlimited-permits.js';
import { configuredScopes, registerPermitGauges } from '../permits/permit-metrics.js';
import { PROCESSOR_STATE_EVERY_MS } from '../processors/processor-state.js';
import { ProcessorStateStore } from '../processors/processor-state-store.js';
import { ProcessorStatePublisher } from '../processors/processor-state-publisher.js';
import { BreakerBoard } from '../breakers/breaker-board.js';
import { DeadLetterStore } from '../dlq/dead-letter-store.js';
import { DeadLetterReplayer } from '../dlq/replay-runner.js';
import { ReplayConnection } from '../dlq/replay-connection.js';
import { topicNames } from '../kafka/topics.js';
import { DlqSink } from '../dlq/dlq-sink.js';
import { BreakerStore } from '../breakers/breaker-store.js';
import { RunBreakerGate } from '../breakers/run-breaker-gate.js';
import { rampUpShares } from '../breakers/ramp-up-shares.js';
import { ownEntry } from '../config/lookup.js';
import { llmFromSimulator } from '../config/profile.js';
import { leasesPerRun } from '../config/workflows.js';
import { RetryForwarder } from '../retries/retry-forwarder.js';
import { RETRY_BUDGET_REPORT_MS, SharedRetryBudgets } from '../retries/shared-retry-budget.js';
import { LagMonitor, readPublishedReport } from '../lag/lag-monitor.js';
import { ConsoleSessions } from '../api/console/console-session.js';
import { ConsoleAssets } from '../api/console/console-assets.js';
import { OverviewSampler } from '../api/console/overview-sampler.js';
import { FinishedRunsSampler } from '../api/console/overview-finished.js';
import { DependencyReports } from '../api/console/dependencies.js';
import { AlertWatch, backlogUse } from '../api/console/alerts.js';
import { readBacklog } from '../admission/backlog-census.js';
import { packageRoot } from '../util/package-root.js';
import { createLagMetrics } from '../lag/lag-metrics.js';
import { WaitingRuns } from '../status/waiting-runs.js';
import { readFinishedRuns } from '../status/finished-runs.js';
import { IngressConsumer } from '../ingress/ingress-consumer.js';
import { readIngressSecrets } from '../ingress/ingress-secrets.js';

export interface RunningRoles {
  roles: Role[];
  apiUrl?: string;
  simulatorUrl?: string;
  opsUrl?: string;
  metrics: Metrics;
  stop(): Promise<void>;
}

/** What every role starter gets; `onStop` registers cleanup, run in reverse order of registration. */
interface RoleContext {
  config: SluiceConfig;
  logger: Logger;
  metrics: Metrics;
  clients: SharedClients;
  onStop: (stop: () => Promise<void>) => void;
  /** The process's one view of the shared breakers, started on first use. */
  breakerBoard: () => Promise<BreakerBoard>;
  /** The process's one admission controller (and its measured service state), for the API and the ingress. */
  admission: () => Promise<AdmissionController>;
  /**
   * The process's one pacer of dependency calls, with the tenants' fair shares it refreshes, for
   * the processor's calls and admission's turns; undefined when `processor.pacing.enabled` is false.
   */
  pacer: () => Promise<DependencyPacer | undefined>;
}

async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port });
  const addr = app.server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  return `http://${host}:${actualPort}`;
}

async function startSimulator({ config, logger, onStop }: RoleContext): Promise<string> {
  const sim = createProviderSim({
    adminKeySha256: config.api.adminKeySha256,
    logger: logger.child({ role: 'provider-sim' }),
    tools: Object.entries(config.dependencies).filter(([, d]) => d.kind === 'tool').map(([name]) => name),
    defaults: {
      anthropic: {
        latencyMs: config.simulator.anthropicLatencyMs,
        jitterMs: config.simulator.anthropicJitterMs,
        ...(config.simulator.anthropicRateLimit && { rateLimit: config.simulator.anthropicRateLimit }),
      },
    },
  });
  const url = await listen(sim, config.simulator.host, config.simulator.port);
  onStop(() => sim.close());
  return url;
}

async function startStatusSink({ config, logger, metrics, clients, onStop }: RoleContext): Promise<void> {
  await clients.ensureTopics();
  const backlog = new AdmissionStore(clients.scripts, clients.keys);
  const log = logger.child({ component: 'status-sink' });
  const sink = new StatusSink({
    kafka: clients.kafka,
    config,
    codec: clients.codec,
    store: new RunStore(await clients.pool(), { namespace: config.namespace }),
    waiting: new WaitingRuns(clients.redis, clients.keys, config.admission.leaseGraceMs),
    deadLetters: await clients.producer(),
    deadLetterTimeoutMs: config.processor.produceTimeoutMs,
    // Finished runs leave the admission backlog; the status sink knows nothing of admission.
    onTerminal: (event, stored) => releaseFinishedRun(backlog, event, stored, log),
    logger,
    metrics,
  });
  await sink.start();
  onStop(() => sink.stop());
}

async function startLagMonitor({ config, logger, metrics, clients, onStop }: RoleContext): Promise<void> {
  await clients.ensureTopics();
  const monitor = new LagMonitor({
    config,
    kafka: clients.kafka,
    redis: clients.redis,
    keys: clients.keys,
    permits: new PermitStore(clients.scripts, clients.keys),
    metrics: createLagMetrics(metrics.registry),
    logger,
    instance: config.instanceId ?? `${hostname()}-${process.pid}`,
  });
  await monitor.start();
  onStop(() => monitor.stop());
}

async function startDlqSink({ config, logger, metrics, clients, onStop }: RoleContext): Promise<void> {
  await clients.ensureTopics();
  const producer = await clients.producer();
  const sink = new DlqSink({
    kafka: clients.kafka,
    config,
    codec: clients.codec,
    store: new DeadLetterStore(await clients.pool(), { namespace: config.namespace }),
    publishStatus: (e) => producer.publishStatus(e, config.processor.produceTimeoutMs),
    logger,
    metrics,
  });
  await sink.start();
  onStop(() => sink.stop());
}

async function startProcessor(ctx: RoleContext, simulatorUrl: string): Promise<void> {
  const { config, logger, metrics, clients, onStop } = ctx;
  const producer = await clients.producer();
  const log = logger.child({ role: 'processor' });
  const unpriced = unpricedModels(config);
  if (unpriced.length > 0) log.warn({ models: unpriced }, 'no pricing entry matches these models: their calls count in sluice_llm_unpriced_tokens_total and runs using them have costUsd null');
  const wakeups = new PermitWakeups(clients.redis, { channel: clients.keys.permitReleased(), logger: log });
  await wakeups.start();
  onStop(() => wakeups.close());
  const permitStore = new PermitStore(clients.scripts, clients.keys);
  // A lease per running run plus one per call in flight, of which an agent has several.
  const keeper = new LeaseKeeper(permitStore, { ttlMs: config.processor.permitLeaseMs, maxLeases: config.processor.maxInFlight * leasesPerRun(config.workflows), logger: log });
  onStop(async () => keeper.stop());
  const permitDeps = { config, keys: clients.keys, store: permitStore, keeper, wakeups, metrics, logger: log };
  // Caps off (benchmarks, kill switch): every permit is granted at once, without Redis.
  const unlimited = config.processor.enforceCaps ? undefined : new UnlimitedPermits();
  if (unlimited) log.warn('processor.enforceCaps is false: concurrency caps are NOT enforced by this processor');
  const board = await ctx.breakerBoard();
  const rampShare = rampUpShares(config, board);
  const pacer = await ctx.pacer();
  if (!pacer) log.warn('processor.pacing.enabled is false: dependency calls are NOT paced by their rate limits');
  if (llmFromSimulator(config)) log.warn({ simulatorUrl }, 'no ANTHROPIC_API_KEY or anthropic.baseUrl: LLM steps are answered by the provider simulator');
  const anthropic = createAnthropicClient({ apiKey: config.anthropic.apiKey, baseUrl: config.anthropic.baseUrl ?? (config.anthropic.apiKey ? 'https://api.anthropic.com' : simulatorUrl) });
  const dependencyPermits = new RedisDependencyPermits(permitDeps, rampShare);
  const retryBudgets = new SharedRetryBudgets({ scripts: clients.scripts, keys: clients.keys, reportEveryMs: RETRY_BUDGET_REPORT_MS, metrics, logger: log });
  retryBudgets.start();
  onStop(() => retryBudgets.stop());
  const tools = new ToolConnections();
  onStop(async () => tools.close());
  const executor = new RunExecutor({
    config,
    llm: (req) => callLlm(anthropic, req),
    tool: (req) => tools.call(req),
    retryBudgets,
    simulatorUrl,
    publishStatus: (e) => producer.publishStatus(e, config.processor.produceTimeoutMs),
    progress: new RedisRunProgress(clients.redis, clients.scripts, clients.keys, log, { produceTimeoutMs: config.kafka.produceTimeoutMs }),
    dependencyPermits: unlimited ?? dependencyPermits,
    adaptiveLimits: unlimited ? undefined : new AdaptiveLimitStore(clients.scripts, clients.keys),
    breakers: new BreakerStore(clients.scripts, clients.keys, (d) => ownEntry(config.dependencies, d)?.breaker),
    board,
    pacer,
    enqueueRetry: (run, headers) => producer.publishRetry(run, headers, config.processor.produceTimeoutMs),
    deadLetters: producer,
    metrics,
    logger: log,
    tokenSettlement: new TokenSettlement(config, new TokenBudgetStore(clients.scripts, clients.keys), log),
  });
  const consumer = new RunConsumer({
    kafka: clients.kafka,
    config,
    codec: clients.codec,
    deadLetters: producer,
    execute: (run, context) => executor.execute(run, context),
    deadLetterRun: (run, context, failure) => executor.deadLetter(run, context, failure),
    permits: unlimited ?? new RedisRunPermits(permitDeps),
    breakers: new RunBreakerGate(config, board),
    onHeld: (run, dependency, until) => void executor.publishHeld(run, dependency, until),
    logger,
    metrics,
  });
  await consumer.start();
  onStop(() => consumer.stop(config.processor.shutdownGraceMs));
  const publisher = new ProcessorStatePublisher({
    store: new ProcessorStateStore(clients.scripts, clients.redis, clients.keys),
    // Random too: two processors in one process (tests) or a reused instance id must not share a field.
    instance: `${config.instanceId ?? `${hostname()}-${process.pid}`}-${randomBytes(4).toString('hex')}`,
    // Without caps nothing waits for a permit; partitions still pause and runs are still held.
    waiters: () => (unlimited ? [] : [...consumer.permitWaiters(), ...dependencyPermits.waiters()]),
    scopes: new Set(configuredScopes(config).map((s) => s.name)),
    paused: () => consumer.pausedPartitions(),
    held: () => consumer.heldRuns(),
    everyMs: PROCESSOR_STATE_EVERY_MS,
    logger: log,
  });
  publisher.start();
  // Stops before the consumer (stops run in reverse), removing the entry: what is still in line is redelivered elsewhere.
  onStop(() => publisher.stop());
  // Each processor also forwards due retries back to the work topics (their own consumer group).
  const forwarder = new RetryForwarder({ kafka: clients.kafka, config, codec: clients.codec, deadLetters: producer, logger: log, metrics });
  await forwarder.start();
  onStop(() => forwarder.stop());
}

/**
 * Admission as both submit adapters decide it: the measured service state (refreshed from Redis),
 * the breakers, the stores of the Lua scripts.
 */
async function startAdmission(ctx: RoleContext): Promise<AdmissionController> {
  const { config, logger, metrics, clients, onStop } = ctx;
  const log = logger.child({ component: 'admission' });
  const board = await ctx.breakerBoard();
  const serviceState = new ServiceState(clients.redis, clients.keys, {
    refreshMs: config.admission.stateRefreshMs,
    rateWindowSec: config.admission.rateWindowSec,
    logger: log,
    workflows: Object.keys(config.workflows),
  });
  await serviceState.start();
  onStop(async () => serviceState.stop());
  return new AdmissionController(config, rememberingStore(ctx), serviceState, board, metrics, new RedisOutageFallback(config.admission.redisOutage), log, new TokenBudgetStore(clients.scripts, clients.keys), await ctx.pacer());
}

/** An admission store that answers refusals of a bucket still short of tokens from memory, counted. */
function rememberingStore({ clients, metrics }: RoleContext): AdmissionStore {
  return new AdmissionStore(clients.scripts, clients.keys, { refusals: new BucketRefusalMemo(), answered: (bucket) => metrics.bucketRefusalsFromMemory.inc({ bucket }) });
}

/** Producers' run requests from the ingress topic, admitted as the API admits submissions. */
async function startIngress(ctx: RoleContext): Promise<void> {
  const { config, logger, metrics, clients, onStop } = ctx;
  const log = logger.child({ role: 'ingress' });
  const secrets = readIngressSecrets(config, { env: process.env, readFile: (path) => readFileSync(path) });
  if (secrets.size === 0) log.warn('no tenant has an ingress secret (tenants.<id>.ingress): every record of the ingress topic will be dead-lettered');
  const ingress = new IngressConsumer({
    kafka: clients.kafka,
    config,
    codec: clients.codec,
    metrics,
    producer: await clients.producer(),
    admission: await ctx.admission(),
    withdrawals: new RedisCancellations(clients.redis, clients.keys),
    // A duplicate waits briefly for a claim in flight elsewhere: within a process, records of one key take turns.
    idempotency: new IdempotencyStore(clients.scripts, clients.keys, { ttlSec: config.admission.idempotencyTtlSec, pendingMs: config.admission.idempotencyPendingMs, waitMs: 1_000, scope: 'ingress' }),
    secrets,
    logger: log,
  });
  await ingress.start();
  onStop(() => ingress.stop());
}

async function startApi(ctx: RoleContext): Promise<string> {
  const { config, logger, metrics, clients, onStop } = ctx;
  const log = logger.child({ role: 'api' });
  const feed = new RunEventFeed({ connect: () => createListenClient(config.postgres, 'sluice-run-events'), logger: log });
  await feed.start();
  onStop(() => feed.close());

  const store = new RunStore(await clients.pool(), { namespace: config.namespace });
  const { admissionRows } = config.api;
  let runs: RunReads = store;
  if (admissionRows.writeBehind) {
    const rows = new AdmissionRows(store, admissionRows, { metrics, logger: log, addTimeoutMs: config.api.recordAdmissionTimeoutMs });
    // Registered before the server, so it stops after it: no 202 queues a row once the drain began.
    onStop(() => rows.close(admissionRows.drainMs));
    runs = rows;
  }
  const cancellations = new RedisCancellations(clients.redis, clients.keys);
  const deadLetters = new DeadLetterStore(await clients.pool(), { statementTimeoutMs: config.postgres.statementTimeoutMs, namespace: config.namespace });
  // The console's DLQ replays send as `sluice dlq replay` does (an idempotent producer, the same
  // timeouts), over one connection kept between replays; closed after the server's own stop, so
  // replays still in flight at shutdown keep their producer.
  const replayConnection = new ReplayConnection(clients.kafka, config.kafka.produceTimeoutMs);
  onStop(() => replayConnection.close());
  const board = await ctx.breakerBoard();
  const lagReport = () => readPublishedReport(clients.redis, clients.keys);
  const waitingRuns = new WaitingRuns(clients.redis, clients.keys, config.admission.leaseGraceMs);
  const processorState = new ProcessorStateStore(clients.scripts, clients.redis, clients.keys);
  const sampler = new OverviewSampler(metrics, config.api.console.sampleMs);
  const pool = await clients.pool();
  const finishedRuns = new FinishedRunsSampler({
    // Cut off by the next read's turn at the latest: a slow Postgres costs the Overview one connection, never a pile of them.
    read: (window) => readFinishedRuns(pool, window, Math.min(config.api.console.sampleMs, config.postgres.statementTimeoutMs)),
    bucketMs: config.api.console.sampleMs,
    logger: log.child({ component: 'console' }),
  });
  const backlogLimits = { tenants: Object.fromEntries(Object.entries(config.tenants).map(([t, c]) => [t, c.admission.maxBacklog])), global: config.admission.maxBacklog };
  const alerts = new AlertWatch(
    async () => ({
      lag: await lagReport().then((r) => (typeof r === 'string' ? undefined : r), () => 'unreadable' as const),
      backlog: await readBacklog(clients.redis, clients.keys, Object.keys(config.tenants)).then((counts) => backlogUse(counts, backlogLimits), () => 'unreadable' as const),
      breakers: [...board.all().values()],
      tallies: sampler.history(),
    }),
  );
  const api = buildApiServer({
    config,
    logger,
    metrics,
    producer: await clients.producer(),
    runs,
    admission: await ctx.admission(),
    idempotency: new IdempotencyStore(clients.scripts, clients.keys, {
      ttlSec: config.admission.idempotencyTtlSec,
      pendingMs: config.admission.idempotencyPendingMs,
      waitMs: config.kafka.produceTimeoutMs + 1_000,
    }),
    reads: new ReadLimits({ config, store: rememberingStore(ctx), metrics, logger: log }),
    readiness: clients.readinessChecks(),
    runStatus: { runs, feed, cancellations },
    withdrawals: cancellations,
    limits: new LimitsStore(clients.redis, clients.keys),
    breakers: {
      store: new BreakerStore(clients.scripts, clients.keys, (d) => ownEntry(config.dependencies, d)?.breaker),
      reports: new DependencyReports(clients.redis, clients.keys, config),
    },
    audit: createAuditLogger(),
    ...(config.api.console.enable && {
      console: {
        sessions: new ConsoleSessions(clients.redis, clients.keys, config.api.console.sessionTtlSec),
        sessionTtlSec: config.api.console.sessionTtlSec,
        assets: new ConsoleAssets(join(packageRoot(), 'dist', 'console')),
        sampler,
        finishedRuns,
        alerts,
        alertEveryMs: config.api.console.sampleMs,
        metrics,
        lagReport,
        waitingForDependency: () => waitingRuns.counts(Object.keys(config.tenants), RUN_CLASSES),
        processorState: () => processorState.read(),
        runs: store,
        cancellations,
        dlq: { store: deadLetters, replayer: new DeadLetterReplayer(deadLetters, clients.codec, topicNames(config.namespace)), kafka: () => replayConnection.get() },
      },
    }),
  });
  const url = await listen(api, config.api.host, config.api.port);
  onStop(() => api.close());
  return url;
}

/** Health and metrics without credentials, on a port of their own (`opsPort`), for any process. */
async function startOps({ config, logger, metrics, clients, onStop }: RoleContext): Promise<string> {
  const ops = Fastify({ loggerInstance: logger.child({ role: 'ops' }) as FastifyBaseLogger, logController: new LogController({ disableRequestLogging: true }) });
  registerHealthRoutes(ops, { readiness: clients.readinessChecks(), metrics });
  const url = await listen(ops, config.api.host, config.opsPort);
  onStop(() => ops.close());
  return url;
}

/**
 * Starts the configured roles in this process. The simulator comes first (the processor calls it),
 * then the sinks and processors, and the API last, so nothing is accepted before it can be served.
 * `stop()` reverses that order: stop accepting, drain work, then close connections.
 */
export async function startRoles(config: SluiceConfig, logger: Logger): Promise<RunningRoles> {
  const roles = new Set(config.roles);
  const metrics = createMetrics();
  const clients = new SharedClients(config, logger);
  const stops: (() => Promise<void>)[] = [];
  let board: Promise<BreakerBoard> | undefined;
  let admission: Promise<AdmissionController> | undefined;
  let pacer: Promise<DependencyPacer | undefined> | undefined;
  const ctx: RoleContext = {
    config,
    logger,
    metrics,
    clients,
    onStop: (s) => stops.push(s),
    // Announcements by pub/sub, the state also read every refresh (seen by the API and processors alike).
    breakerBoard: () =>
      (board ??= (async () => {
        const b = new BreakerBoard(clients.redis, clients.keys, { dependencies: Object.keys(config.dependencies), pollMs: config.admission.stateRefreshMs, logger, metrics });
        await b.start();
        stops.push(() => b.close());
        return b;
      })()),
    admission: () => (admission ??= startAdmission(ctx)),
    // Pacing off (benchmarks): calls go out as soon as their permits allow, without Redis.
    pacer: () =>
      (pacer ??= (async () => {
        if (!config.processor.pacing.enabled) return undefined;
        const shares = new FairShareBoard(clients.redis, clients.keys, config, logger.child({ component: 'fair-shares' }));
        await shares.start();
        stops.push(async () => shares.stop());
        return new DependencyPacer({ store: new PacingStore(clients.scripts, clients.keys), shares, config, metrics, now: Date.now, rampShare: rampUpShares(config, await ctx.breakerBoard()) });
      })()),
  };
  const stop = async () => {
    for (const s of stops.reverse()) {
      try {
        await s();
      } catch (err) {
        logger.warn({ err }, 'error while stopping a role');
      }
    }
    await clients.close();
  };
  const running: RunningRoles = { roles: [...roles], metrics, stop };

  try {
    if (roles.has('processor') || roles.has('api')) registerPermitGauges(metrics, clients.redis, clients.keys, config);
    if (roles.has('provider-sim')) running.simulatorUrl = await startSimulator(ctx);
    if (roles.has('status-sink')) await startStatusSink(ctx);
    if (roles.has('dlq-sink')) await startDlqSink(ctx);
    if (roles.has('processor')) await startProcessor(ctx, config.simulator.url ?? running.simulatorUrl ?? `http://${config.simulator.host}:${config.simulator.port}`);
    if (roles.has('ingress')) await startIngress(ctx);
    if (roles.has('lag-monitor')) {
      if (config.lagMonitor.enable) await startLagMonitor(ctx);
      else logger.info('lagMonitor.enable is false: the lag-monitor role does not run');
    }
    if (roles.has('api')) running.apiUrl = await startApi(ctx);
    if (config.opsPort > 0) running.opsUrl = await startOps(ctx);
  } catch (err) {
    await stop();
    throw err;
  }
  return running;
}
