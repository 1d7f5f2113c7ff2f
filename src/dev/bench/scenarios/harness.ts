/**
 * `npm run -s bench scenario -- --name <s>`: one scenario end to end through HTTP, against Sluice
 * and against the naive configuration of the same parts (systems.ts), one after the other on the
 * same infrastructure. Each system runs as separate processes (provider simulator, API, processor,
 * sinks) in its own namespace; the harness applies the fault timeline to its simulator, sends the
 * open-loop traffic with the scenario's client retries, follows every run on the status topic to
 * its terminal status, and computes the figures (figures.ts) and the chart (chart.ts).
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { parseConfig } from '../../../config/load.js';
import type { SluiceConfig } from '../../../config/schema.js';
import { migrate } from '../../../db/migrate.js';
import { EventCodec } from '../../../events/codec.js';
import { FileSchemaRegistry } from '../../../events/file-schema-registry.js';
import type { RunClass } from '../../../events/schemas.js';
import { createKafka } from '../../../kafka/client.js';
import { ensureTopics, groupId, topicNames, type GroupRole } from '../../../kafka/topics.js';
import { freePort } from '../../../util/free-port.js';
import { waitForHttp } from '../admission-bench.js';
import { cpuShares, processCpuMs, readCpu, type CpuShares } from '../cpu-time.js';
import { deleteKeys } from '../bench-redis.js';
import { DEMO_TENANT_KEYS, childEnv, localConfig, withBenchHarness, writeYaml, type BenchHarness } from '../bench-harness.js';
import { runOpenLoop } from '../open-loop.js';
import { simAdmin } from '../sim-admin.js';
import { writeScenarioChart, type ScenarioChartInput } from './chart.js';
import { systemFigures, timeline, type SystemFigures } from './figures.js';
import { driveProvider, readProviderSample } from './provider-timeline.js';
import { scenarioTable, targetVerdicts, type ScenarioReport } from './report.js';
import { loadScenario, type Scenario } from './scenario.js';
import { StatusFollower } from './status-follower.js';
import { SYSTEM_BUILDERS, llmCallsPerRun, type RunLabel, type SystemName } from './systems.js';
import { ScenarioTraffic, type SendRecord } from './traffic.js';

export interface ScenarioRunOptions {
  name: string;
  timeScale: number;
  seed: number;
  json: boolean;
  /** Where the chart's SVG goes; none when undefined. */
  chartPath?: string;
  /** Directory of the scenario files (default k6/scenarios). */
  scenarioDir?: string;
  /** Only these systems (default: all the scenario calls for). */
  systems?: readonly RunLabel[];
}

/** After the last send, how long runs are followed beyond their deadline before the rest count as lost. */
const FOLLOW_GRACE_MS = 15_000;
const REQUEST_TIMEOUT_MS = 10_000;
const MAX_OUTSTANDING = 2_000;
const WARMUP_RUNS = 6;
const WARMUP_TIMEOUT_MS = 90_000;
const HTTP_WARMUP_SEC = 2;
/** The processes of one system, each its own process as in production, in the order they start. */
const SYSTEM_PROCESSES = ['provider-sim', 'api', 'processor', 'status-sink,dlq-sink'] as const;

interface SystemRun {
  figures: SystemFigures;
  chart: ScenarioChartInput['systems'][number];
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** CPU counters of the system's processes (started in SYSTEM_PROCESSES order) and of this one, the load generator. */
function cpuSourcesOf(procs: readonly ChildProcess[]): Record<string, () => number> {
  const sources: Record<string, () => number> = Object.fromEntries(procs.map((p, i) => [SYSTEM_PROCESSES[i]!, () => processCpuMs(p.pid!)]));
  sources['harness (load generator)'] = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1_000;
  };
  return sources;
}

const deadlinesMs = (s: Pick<Scenario, 'deadlineSec'>): Record<RunClass, number> => ({ interactive: s.deadlineSec.interactive * 1000, batch: s.deadlineSec.batch * 1000 });

/** The most requests per second the scenario's streams send at once (each at its highest rate). */
function peakRatePerSec(scenario: Scenario): number {
  return scenario.arrivals.reduce((sum, { pattern: p }) => sum + (p.kind === 'constant' ? p.rate : p.kind === 'ramp' ? Math.max(p.from, p.to) : Math.max(p.base, p.peak)), 0);
}

function labelsFor(scenario: Scenario): RunLabel[] {
  return scenario.arrivals.some((a) => a.noisy === true) ? ['sluice', 'sluice-without-noisy', 'naive'] : ['sluice', 'naive'];
}

async function runSystem(h: BenchHarness, scenario: Scenario, label: RunLabel, opts: ScenarioRunOptions, stamp: string): Promise<SystemRun> {
  const { infra, children, dir, logger, redis } = h;
  const system: SystemName = label === 'naive' ? 'naive' : 'sluice';
  const namespace = `scenario-${stamp}-${label}.`;
  const [simPort, apiPort] = [await freePort(), await freePort()];
  const simulatorUrl = `http://127.0.0.1:${simPort}`;
  const registryDir = join(dir, 'schema-registry');
  const base = localConfig();
  base.localInfra = false;
  base.logLevel = 'warn';
  base.schemaRegistry = { dir: registryDir };
  base.simulator = { ...base.simulator, host: '127.0.0.1', port: simPort, url: simulatorUrl };
  base.anthropic = { baseUrl: simulatorUrl };
  base.api = { ...base.api, host: '127.0.0.1', port: apiPort };
  const doc = SYSTEM_BUILDERS[system](base, scenario);
  const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace };
  const config: SluiceConfig = parseConfig(doc, env, `${label}.yaml`);
  const kafka = createKafka(config.kafka, logger, `scenario-${process.pid}`);
  const admin = kafka.admin();
  await admin.connect();
  const procs: ChildProcess[] = [];
  let follower: StatusFollower | undefined;
  let cpuTimer: NodeJS.Timeout | undefined;
  try {
    await ensureTopics(admin, config.kafka, namespace);
    const start = async (roles: string, i: number) => {
      const path = writeYaml(dir, `${label}-${i}.yaml`, { ...doc, opsPort: await freePort() });
      return children.start('cli/main.js', ['start', '--config', path, '--roles', roles], childEnv(env));
    };
    for (const [i, roles] of SYSTEM_PROCESSES.entries()) procs.push(await start(roles, i));
    const died = Promise.race(procs.map((p, i) => children.exited(p, `${label} process ${i}`)));
    await Promise.race([Promise.all([waitForHttp(`${simulatorUrl}/healthz`, 60_000), waitForHttp(`http://127.0.0.1:${apiPort}/healthz`, 90_000)]), died]);

    follower = await StatusFollower.start(kafka, new EventCodec(new FileSchemaRegistry(registryDir)), namespace);
    await Promise.race([warmUp(`http://127.0.0.1:${apiPort}`, follower, config, peakRatePerSec(scenario)), died]);
    await simAdmin(simulatorUrl, 'POST', '/stats/reset');

    const traffic = new ScenarioTraffic(
      {
        apiUrl: `http://127.0.0.1:${apiPort}`,
        keys: DEMO_TENANT_KEYS,
        scenario,
        timeScale: opts.timeScale,
        seed: opts.seed,
        skipStream: label === 'sluice-without-noisy' ? (i) => scenario.arrivals[i]!.noisy === true : undefined,
        // A naive platform has no deadlines to propagate: its clients just wait.
        deadlineMs: system === 'naive' ? undefined : deadlinesMs(scenario),
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
        maxOutstanding: MAX_OUTSTANDING,
      },
      follower,
    );
    const first = await readProviderSample(simulatorUrl, 0);
    const provider = driveProvider(simulatorUrl, scenario.faults, opts.timeScale, () => traffic.nowMs());
    // Which processes the machine's cores went to while the scenario sent: on a machine shared by
    // the load generator, the system and its infrastructure, a figure to read every latency with.
    const cpuSources = cpuSourcesOf(procs);
    const cpuBefore = readCpu(cpuSources);
    const cpuWhileSending = new Promise<CpuShares>((resolve) => {
      cpuTimer = setTimeout(() => resolve(cpuShares(cpuBefore, readCpu(cpuSources))), (scenario.durationSec * 1_000) / opts.timeScale);
    });
    const result = await Promise.race([traffic.run(Math.max(...Object.values(deadlinesMs(scenario))) + FOLLOW_GRACE_MS), died]);
    const endMs = traffic.nowMs();
    const samples = [first, ...(await provider.stop())];
    const inputs = {
      scenario,
      timeScale: opts.timeScale,
      sends: result.sends,
      schedule: result.schedule,
      dropped: result.dropped,
      samples,
      llmCallsPerRun: llmCallsPerRun(doc),
      backlogBound: system === 'naive' ? null : config.admission.maxBacklog,
      endMs,
      cpu: await cpuWhileSending,
    };
    return { figures: systemFigures(inputs), chart: { system: label, backlogBound: inputs.backlogBound, seconds: timeline(inputs) } };
  } finally {
    clearTimeout(cpuTimer);
    await follower?.stop().catch(() => undefined);
    await Promise.all(procs.map((p) => children.stop(p, 10_000)));
    await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
    const groups: GroupRole[] = ['processor', 'status-sink', 'dlq-sink', 'retry-forwarder'];
    await admin.deleteGroups([...groups.map((g) => groupId(namespace, g)), `${namespace}scenario.status-follower`]).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
    await deleteKeys(redis, `${namespace}*`).catch(() => undefined);
  }
}

/**
 * A few runs through the whole path before measuring (consumer groups joined, scripts loaded,
 * connections open), then a wait until every tenant's admission bucket has refilled, so the
 * scenario starts from a rested system.
 */
async function warmUp(apiUrl: string, follower: StatusFollower, config: SluiceConfig, peakRatePerSec: number): Promise<void> {
  const scenario: Scenario = {
    name: 'warm-up',
    description: 'warm-up',
    durationSec: 2,
    deadlineSec: { interactive: 30, batch: 60 },
    arrivals: [{ tenant: 'tenant-b', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: WARMUP_RUNS / 2 } }],
    clientRetry: { kind: 'none' },
    faults: [],
    targets: {},
  };
  const warmup = new ScenarioTraffic(
    { apiUrl, keys: DEMO_TENANT_KEYS, scenario, timeScale: 1, seed: 1, deadlineMs: deadlinesMs(scenario), requestTimeoutMs: REQUEST_TIMEOUT_MS, maxOutstanding: MAX_OUTSTANDING },
    follower,
  );
  const { sends } = await warmup.run(WARMUP_TIMEOUT_MS);
  const unfinished = sends.filter((s: SendRecord) => s.terminalStatus !== 'completed');
  if (unfinished.length > 0) throw new Error(`warm-up: ${unfinished.length} of ${sends.length} runs did not complete (${JSON.stringify(unfinished[0])})`);
  // The HTTP path at the scenario's peak rate, with submissions refused as invalid before they
  // touch a bucket or a backlog (a deadline below the minimum): a scenario meets a warm API, as
  // production traffic does, not one compiling its code under the first burst.
  const rest = await runOpenLoop({
    url: `${apiUrl}/v1/runs`,
    ratePerSec: Math.max(1, peakRatePerSec),
    durationSec: HTTP_WARMUP_SEC,
    body: () => JSON.stringify({ workflow: 'support-reply', input: {}, deadlineMs: 1 }),
    headers: { authorization: `Bearer ${DEMO_TENANT_KEYS['tenant-b']}`, 'content-type': 'application/json' },
  });
  if (rest.statuses[400] !== rest.scheduled) throw new Error(`warm-up: expected ${rest.scheduled} answers 400, got ${JSON.stringify(rest.statuses)} and ${rest.errors} errors`);
  const refillMs = Math.max(...Object.values(config.tenants).map((t) => (t.admission.bucket.refillPerSec > 0 ? (t.admission.bucket.capacity / t.admission.bucket.refillPerSec) * 1000 : 0)));
  await sleep(Math.min(refillMs, 10_000));
}

export async function runScenario(opts: ScenarioRunOptions): Promise<ScenarioReport> {
  const scenario = loadScenario(opts.name, opts.scenarioDir);
  const stamp = Date.now().toString(36);
  return withBenchHarness('scenario', async (h) => {
    const pool = new pg.Pool({ connectionString: h.infra.databaseUrl, max: 1 });
    try {
      await migrate(pool);
    } finally {
      await pool.end();
    }
    const runs: Partial<Record<RunLabel, SystemRun>> = {};
    for (const label of labelsFor(scenario).filter((l) => opts.systems?.includes(l) ?? true)) runs[label] = await runSystem(h, scenario, label, opts, stamp);
    const systems = Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, r.figures])) as Partial<Record<RunLabel, SystemFigures>>;
    let chart: string | undefined;
    if (opts.chartPath !== undefined) {
      const faults = scenario.faults.map((f) => ({ fromSec: f.atSec / opts.timeScale, toSec: (f.atSec + f.forSec) / opts.timeScale, label: `${f.target}: ${JSON.stringify(f.fault)}` }));
      await writeScenarioChart(opts.chartPath, { scenario: scenario.name, timeScale: opts.timeScale, faults, systems: Object.values(runs).map((r) => r.chart) });
      chart = opts.chartPath;
    }
    return { scenario: scenario.name, timeScale: opts.timeScale, seed: opts.seed, systems, targets: targetVerdicts(scenario, systems), chart };
  });
}

export async function benchScenario(opts: ScenarioRunOptions): Promise<void> {
  const report = await runScenario(opts);
  process.stdout.write(opts.json ? `${JSON.stringify(report)}\n` : scenarioTable(report));
}
