import { Command } from 'commander';
import { ADMISSION_TARGETS, benchAdmission, type AdmissionTarget } from './admission-bench.js';
import { startBareServer } from './bare-server.js';
import type { BullWork } from './bullmq-worker.js';
import { RUN_LABELS, type RunLabel } from './scenarios/systems.js';

const numbers = (v: string) =>
  v.split(',').map((s) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number: ${s}`);
    return n;
  });

const bounded = (min: number, max: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`not an integer in [${min}, ${max}]: ${v}`);
  return n;
};

const runLabels = (v: string) =>
  v.split(',').map((l) => {
    if (!(RUN_LABELS as readonly string[]).includes(l)) throw new Error(`not one of ${RUN_LABELS.join(', ')}: ${l}`);
    return l as RunLabel;
  });

const admissionTargets = (v: string) =>
  v.split(',').map((t) => {
    if (!(ADMISSION_TARGETS as readonly string[]).includes(t)) throw new Error(`not one of ${ADMISSION_TARGETS.join(', ')}: ${t}`);
    return t as AdmissionTarget;
  });

interface PhaseFlags {
  runs: number;
  warmup: number;
  concurrency: number;
  phaseTimeout: number;
}

/** The options of the benches that push runs through one processor per phase. */
const withPhaseOptions = (command: Command, defaultRuns: number): Command =>
  command
    .option('--runs <n>', 'runs measured per processor phase', bounded(10, 20_000), defaultRuns)
    .option('--warmup <n>', 'runs per processor phase before measuring', bounded(1, 5_000), 200)
    .option('--concurrency <n>', 'processor.maxInFlight and every cap (processor: also the BullMQ worker concurrency)', bounded(1, 1_000), 64)
    .option('--phase-timeout <sec>', 'upper bound on one measured processor phase', bounded(5, 600), 120);

const phaseOptions = (o: PhaseFlags) => ({ runs: o.runs, warmup: o.warmup, concurrency: o.concurrency, phaseTimeoutSec: o.phaseTimeout });

const program = new Command('sluice-bench').description('Sluice benchmarks: figures as ratios against a baseline measured in the same run');

program
  .command('admission')
  .description('p50/p99 of the admission reject and accept paths vs a bare Fastify route, open-loop')
  .option('--rates <list>', 'requests per second, comma-separated', numbers, [200, 500, 1000])
  .option('--duration <sec>', 'seconds per measurement', Number, 5)
  .option('--warmup <sec>', 'seconds of warm-up per target', Number, 2)
  .option('--paths <list>', `paths to measure, comma-separated, of ${ADMISSION_TARGETS.join(', ')}`, admissionTargets, [...ADMISSION_TARGETS])
  .option('--variants <list>', 'Sluice APIs measured side by side, comma-separated: write-behind, no-write-behind, checkout:<dir> (another built checkout)', (v: string) => v.split(','), ['write-behind'])
  .option('--rounds <n>', 'times each path is measured per rate, the paths taking turns', bounded(1, 100), 1)
  .option('--cpu-prof <dir>', 'run Sluice\'s API under node --cpu-prof, writing the profile to this directory')
  .action((o: { rates: number[]; duration: number; warmup: number; paths: AdmissionTarget[]; variants: string[]; rounds: number; cpuProf?: string }) =>
    benchAdmission({ rates: o.rates, durationSec: o.duration, warmupSec: o.warmup, targets: o.paths, variants: o.variants, rounds: o.rounds, cpuProfDir: o.cpuProf }),
  );

withPhaseOptions(
  program.command('processor').description('runs/s end to end: Sluice with caps enforced and off, vs a BullMQ worker doing the same calls (runs are its jobs); Redis calls per run'),
  2_000,
)
  .option('--cpu-prof <dir>', 'run each Sluice processor under node --cpu-prof, writing its profile to this directory')
  .action(async (o: PhaseFlags & { cpuProf?: string }) => {
    // Loaded on use: the other benches run without bullmq installed.
    const { benchProcessor } = await import('./processor-bench.js');
    await benchProcessor({ ...phaseOptions(o), cpuProfDir: o.cpuProf });
  });

withPhaseOptions(
  program.command('agent').description('an agent step (support-agent) with parallel and with sequential tool calls vs the fixed support-reply workflow: runs/s, latency, model turns and processor CPU per run and per turn'),
  1_000,
)
  .option('--rounds <n>', 'times each phase is measured, the phases taking turns', bounded(1, 20), 2)
  .option('--tool-latency <ms>', 'latency of every simulated tool call (the Messages API answers at 0 ms)', bounded(0, 10_000), 50)
  .option('--json', 'print the figures as one JSON line instead of a table', false)
  .action(async (o: PhaseFlags & { rounds: number; toolLatency: number; json: boolean }) => {
    const { benchAgent } = await import('./agent-bench.js');
    await benchAgent({ ...phaseOptions(o), rounds: o.rounds, toolLatencyMs: o.toolLatency, json: o.json });
  });

program
  .command('breaker')
  .description('time from the first failing call to every instance holding back (shared vs per-instance breakers), and call amplification in a 429 storm (Sluice vs naive 1/2/4/8 s retries)')
  .option('--trials <n>', 'propagation trials per mode', bounded(1, 1_000), 30)
  .option('--instances <n>', 'instances sharing the breaker', bounded(1, 64), 4)
  .option('--rate <n>', 'runs offered per second in the storm', bounded(1, 2_000), 20)
  .option('--duration <sec>', 'seconds of arrivals in the storm', bounded(1, 600), 15)
  .option('--fault <sec>', 'seconds of 429s from the start of the storm', bounded(1, 600), 10)
  .option('--scale <factor>', 'multiplies every duration of the storm (0.1 - 1)', Number, 1)
  .action(async (o: { trials: number; instances: number; rate: number; duration: number; fault: number; scale: number }) => {
    if (!(o.scale >= 0.1 && o.scale <= 1)) throw new Error(`--scale must be in [0.1, 1], got ${o.scale}`);
    if (o.fault > o.duration) throw new Error('--fault must not exceed --duration');
    const { benchBreaker } = await import('./breaker-bench.js');
    await benchBreaker({ trials: o.trials, instances: o.instances, rate: o.rate, durationSec: o.duration, faultSec: o.fault, scale: o.scale });
  });

program
  .command('pacing')
  .description('429s and achieved call rate at twice the provider\'s request limit, Sluice with pacing on and off side by side')
  .option('--rpm <n>', 'the provider\'s request limit per minute', bounded(60, 6_000), 600)
  .option('--seconds <sec>', 'seconds of arrivals', bounded(5, 600), 60)
  .option('--load <factor>', 'offered runs per second as a multiple of the limit (1 - 4)', Number, 2)
  .option('--seed <n>', 'seed of the arrivals\' tenants and classes', bounded(0, 2 ** 31 - 1), 1)
  .option('--phase-timeout <sec>', 'upper bound on the phase: arrivals and drain', bounded(30, 3_600), 300)
  .action(async (o: { rpm: number; seconds: number; load: number; seed: number; phaseTimeout: number }) => {
    if (!(o.load >= 1 && o.load <= 4)) throw new Error(`--load must be in [1, 4], got ${o.load}`);
    if (o.phaseTimeout <= o.seconds) throw new Error('--phase-timeout must exceed --seconds');
    const { benchPacing } = await import('./pacing-bench.js');
    await benchPacing({ rpm: o.rpm, seconds: o.seconds, load: o.load, seed: o.seed, phaseTimeoutSec: o.phaseTimeout });
  });

program
  .command('token-budget')
  .description('tokens each tenant used per minute against its token budget at admission, with budgets and without side by side')
  .option('--seconds <sec>', 'seconds of arrivals: the measured window', bounded(10, 600), 60)
  .option('--load <factor>', 'tokens each tenant offers per minute as a multiple of its budget (1 - 10)', Number, 3)
  .option('--seed <n>', 'seed of the arrivals\' offsets and run sizes', bounded(0, 2 ** 31 - 1), 1)
  .option('--phase-timeout <sec>', 'upper bound on the phase: arrivals and drain', bounded(30, 3_600), 180)
  .action(async (o: { seconds: number; load: number; seed: number; phaseTimeout: number }) => {
    if (!(o.load >= 1 && o.load <= 10)) throw new Error(`--load must be in [1, 10], got ${o.load}`);
    if (o.phaseTimeout <= o.seconds) throw new Error('--phase-timeout must exceed --seconds');
    const { benchTokenBudget } = await import('./token-budget-bench.js');
    await benchTokenBudget({ seconds: o.seconds, load: o.load, seed: o.seed, phaseTimeoutSec: o.phaseTimeout });
  });

withPhaseOptions(
  program
    .command('lag')
    .description('the lag monitor\'s cost (Kafka requests and CPU per poll, per 100 partitions), and the processor bench with and without a lag monitor beside it'),
  1_000,
)
  .option('--partitions <list>', 'partitions in all over the five topics, one measurement each, comma-separated', numbers, [100, 400])
  .option('--polls <n>', 'polls measured per scenario', bounded(3, 500), 20)
  .option('--interval <ms>', 'the monitor\'s poll interval', bounded(200, 60_000), 1_000)
  .option('--standby <sec>', 'seconds the monitor is measured as a standby', bounded(1, 600), 10)
  .option('--rounds <n>', 'pairs of processor phases (without, with the monitor)', bounded(1, 20), 2)
  .action(async (o: PhaseFlags & { partitions: number[]; polls: number; interval: number; standby: number; rounds: number }) => {
    if (o.partitions.some((p) => !Number.isInteger(p) || p < 5 || p > 5_000)) throw new Error('--partitions: whole numbers from 5 (one per topic) to 5000');
    const { benchLag } = await import('./lag-bench.js');
    await benchLag({
      partitions: o.partitions,
      polls: o.polls,
      intervalMs: o.interval,
      standbySec: o.standby,
      rounds: o.rounds,
      processor: phaseOptions(o),
    });
  });

program
  .command('inflight')
  .description('processors holding many slow runs at once: runs/s against in flight / run time, event-loop delay, memory and CPU per run, caps exact')
  .option('--processors <n>', 'processor processes (1 or 3)', bounded(1, 3), 1)
  .option('--in-flight <n>', 'runs in flight at once over all processors: their maxInFlight values add up to it', bounded(3, 10_000), 1_000)
  .option('--latency-ms <ms>', 'latency of every LLM call (support-reply makes 2; its tool call is at 0 ms)', bounded(10, 60_000), 5_000)
  .option('--duration-s <sec>', 'seconds of the measured window, after a warm-up of one run time', bounded(5, 600), 60)
  .option('--cap <n>', 'the LLM dependency\'s concurrency cap over all processors (default: twice the in-flight total with 1 processor, 80% of it with more, so it binds)', bounded(1, 100_000))
  .option('--json', 'print the figures as JSON instead of a table', false)
  .action(async (o: { processors: number; inFlight: number; latencyMs: number; durationS: number; cap?: number; json: boolean }) => {
    if (o.processors !== 1 && o.processors !== 3) throw new Error(`--processors must be 1 or 3, got ${o.processors}`);
    const llmCap = o.cap ?? (o.processors === 1 ? o.inFlight * 2 : Math.floor(o.inFlight * 0.8));
    const { benchInflight } = await import('./inflight-bench.js');
    await benchInflight({ processors: o.processors, inFlight: o.inFlight, latencyMs: o.latencyMs, durationSec: o.durationS, llmCap, json: o.json });
  });

program
  .command('footprint')
  .description('what one run costs end to end (API → processor → status sink): Redis commands and bytes, Kafka records and bytes per topic, Postgres rows per table')
  .option('--runs <n>', 'runs measured', bounded(10, 20_000), 200)
  .option('--json', 'print the figures as JSON instead of a table', false)
  .action(async (o: { runs: number; json: boolean }) => {
    const { benchFootprint } = await import('./footprint-bench.js');
    await benchFootprint({ runs: o.runs, json: o.json });
  });

program
  .command('scenario')
  .description('a load scenario (k6/scenarios/<name>.json) end to end through HTTP, against Sluice and a naive configuration of the same parts, one after the other')
  .requiredOption('--name <name>', 'the scenario: a file name in k6/scenarios without .json')
  .option('--time-scale <k>', 'divides every duration and instant of the scenario, rates unchanged (1 - 100)', Number, 1)
  .option('--seed <n>', 'seed of the send times', bounded(0, 2 ** 31 - 1), 1)
  .option('--chart <path>', 'write the timeline chart (SVG) here', undefined)
  .option('--systems <list>', `only these systems, comma-separated, of ${RUN_LABELS.join(', ')}`, runLabels)
  .option('--json', 'print the report as one JSON object instead of a table', false)
  .action(async (o: { name: string; timeScale: number; seed: number; chart?: string; systems?: RunLabel[]; json: boolean }) => {
    if (!(o.timeScale >= 1 && o.timeScale <= 100)) throw new Error(`--time-scale must be in [1, 100], got ${o.timeScale}`);
    const { benchScenario } = await import('./scenarios/harness.js');
    await benchScenario({ name: o.name, timeScale: o.timeScale, seed: o.seed, json: o.json, chartPath: o.chart, systems: o.systems });
  });

program
  .command('ingress')
  .description('the Kafka ingress (SluiceProducer → ingress role → work topic) vs producing RunRequested straight to the work topic, side by side: runs onto the work topic/s, runs done/s, produce → queued and → running of lone runs')
  .option('--events <n>', 'runs per burst, each path', bounded(100, 20_000), 2_000)
  .option('--probes <n>', 'lone runs per path for latency, the paths taking turns', bounded(10, 1_000), 100)
  .option('--phase-timeout <sec>', 'upper bound on each burst (the probes: twice it)', bounded(10, 600), 120)
  .option('--json', 'print the figures as one JSON line instead of a table', false)
  .action(async (o: { events: number; probes: number; phaseTimeout: number; json: boolean }) => {
    const { benchIngress } = await import('./ingress-bench.js');
    await benchIngress({ events: o.events, probes: o.probes, phaseTimeoutSec: o.phaseTimeout, json: o.json });
  });

program
  .command('bullmq-worker', { hidden: true })
  .requiredOption('--redis <url>', 'Redis URL')
  .requiredOption('--queue <name>', 'queue name')
  .requiredOption('--prefix <prefix>', 'BullMQ key prefix')
  .requiredOption('--concurrency <n>', 'worker concurrency', Number)
  .requiredOption('--work <kind>', 'http (the three simulator calls) or noop')
  .requiredOption('--sim <url>', 'provider simulator URL')
  .action(async (o: { redis: string; queue: string; prefix: string; concurrency: number; work: string; sim: string }) => {
    if (o.work !== 'http' && o.work !== 'noop') throw new Error(`--work must be http or noop, got ${o.work}`);
    const { runBullWorker } = await import('./bullmq-worker.js');
    return runBullWorker({ redisUrl: o.redis, queue: o.queue, prefix: o.prefix, concurrency: o.concurrency, work: o.work as BullWork, simulatorUrl: o.sim });
  });

program
  .command('bare-server', { hidden: true })
  .requiredOption('--port <port>', 'port', Number)
  .action(async (o: { port: number }) => {
    const stop = await startBareServer(o.port);
    await new Promise((resolve) => process.once('SIGTERM', resolve));
    await stop();
  });

program.parseAsync(process.argv).then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`sluice-bench: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
