/**
 * `npm run bench inflight`: processors holding many slow runs at once. The simulator answers
 * every LLM call after exactly `latencyMs`; the runs topic is kept topped up so every processor
 * stays at its maxInFlight; over the measured window the bench reads each processor's metrics
 * every second and reports throughput against Little's law, event-loop delay, memory and CPU
 * per run, and (several processors, a binding LLM cap) whether the cap held exactly.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { parseConfig } from '../../config/load.js';
import { EventCodec } from '../../events/codec.js';
import { FileSchemaRegistry } from '../../events/file-schema-registry.js';
import type { RunRequested } from '../../events/schemas.js';
import { createKafka } from '../../kafka/client.js';
import { ensureTopics, groupId, topicNames } from '../../kafka/topics.js';
import { EventProducer } from '../../producers/event-producer.js';
import { newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import { freePort } from '../../util/free-port.js';
import { withTimeout } from '../../util/with-timeout.js';
import { waitForHttp } from './admission-bench.js';
import { deleteKeys } from './bench-redis.js';
import { childEnv, localConfig, scrape, withBenchHarness, writeYaml } from './bench-harness.js';
import { simAdmin } from './sim-admin.js';
import { BENCH_WORKFLOW, LLM_CALLS_PER_RUN, setLatencies, stackConfigDoc } from './sizing-stack.js';
import { bytesPerRun, median, mostSeen, promSum, splitInFlight, throughputFigure, windowByLabel, windowMeanMs, type ThroughputFigure } from './sizing-figures.js';

export interface InflightBenchOptions {
  processors: number;
  /** Runs in flight at once over all processors: their maxInFlight values add up to it. */
  inFlight: number;
  latencyMs: number;
  /** Seconds of the measured window, after the warm-up. */
  durationSec: number;
  /** The anthropic dependency's cap over all processors. */
  llmCap: number;
  json: boolean;
}

const TENANTS = ['tenant-a', 'tenant-b', 'tenant-c'];
const SAMPLE_MS = 1_000;
/** Longest wait for every processor to have runs in flight (group join, rebalances). */
const FILL_TIMEOUT_MS = 90_000;
const LAG_TARGET_MS = 50;
const RATIO_TARGET = 0.9;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One scrape of one processor. */
interface Sample {
  at: number;
  finished: number;
  cpuSec: number;
  rssBytes: number;
  heapBytes: number;
  inFlight: number;
  /** p99 of the event-loop delay since the previous scrape (prom-client resets its histogram on every scrape). */
  lagP99Ms: number;
}

function sample(text: string, at: number): Sample {
  return {
    at,
    finished: promSum(text, 'sluice_runs_finished_total'),
    cpuSec: promSum(text, 'sluice_process_process_cpu_seconds_total'),
    rssBytes: promSum(text, 'sluice_process_process_resident_memory_bytes'),
    heapBytes: promSum(text, 'sluice_process_nodejs_heap_size_used_bytes'),
    inFlight: promSum(text, 'sluice_processor_runs_in_flight'),
    lagP99Ms: promSum(text, 'sluice_process_nodejs_eventloop_lag_p99_seconds') * 1000,
  };
}

export interface ProcessorFigures {
  maxInFlight: number;
  runsPerSec: number;
  /** Runs/s against this processor's share of the ideal. */
  ratioOfShare: number;
  medianInFlight: number;
  lagP99Ms: { median: number; worst: number };
  idle: { rssBytes: number; heapBytes: number };
  loaded: { rssBytes: number; heapBytes: number };
  perRunBytes: { rss: number; heap: number };
  cpuMsPerRun: number;
  /** Mean milliseconds, from the processor's histograms over the window: a run's execution, one LLM call, a run's wait for permits and a slot. */
  meanMs: { execution: number; llmCall: number; queueWait: number };
}

export interface InflightResult {
  options: InflightBenchOptions;
  runTimeMs: number;
  windowSec: number;
  /** Runs that can hold the LLM at once: the smaller of the in-flight total and the LLM cap. */
  concurrent: number;
  throughput: ThroughputFigure;
  processors: ProcessorFigures[];
  outcomes: Record<string, number>;
  /** Runs sent to the retry topic in the window, by reason. */
  retries: Record<string, number>;
  /** Dependency calls in the window, by outcome (every dependency). */
  calls: Record<string, number>;
  /** Breaker transitions in the window, by the state entered: the most any one processor saw (each sees every one). */
  breakerTransitions: Record<string, number>;
  /** The most LLM calls in flight at once the simulator saw, from the first run to the end. */
  llmPeakConcurrent: number;
  capsExact: boolean;
  published: number;
}

function runRequest(i: number, deadlineMs: number): RunRequested {
  const now = Date.now();
  return {
    runId: newRunId(now),
    tenantId: TENANTS[i % TENANTS.length]!,
    workflow: BENCH_WORKFLOW,
    class: 'interactive',
    admittedAt: now,
    deadline: now + deadlineMs,
    attempt: 1,
    traceparent: childTraceparent(undefined),
    input: JSON.stringify({ message: 'Where is order 42?', orderId: String(i) }),
    idempotencyKey: null,
    dueAt: null,
  };
}

/** Figures of one processor from its samples (idle ones before any run, those of the window) and its metrics at both ends of the window. */
function processorFigures(maxInFlight: number, idle: Sample[], window: Sample[], idealShare: number, texts: { first: string; last: string }): ProcessorFigures {
  const first = window[0]!;
  const last = window[window.length - 1]!;
  const finished = last.finished - first.finished;
  const windowSec = (last.at - first.at) / 1000;
  const idleRss = median(idle.map((s) => s.rssBytes));
  const idleHeap = median(idle.map((s) => s.heapBytes));
  const loadedRss = median(window.map((s) => s.rssBytes));
  const loadedHeap = median(window.map((s) => s.heapBytes));
  const medianInFlight = median(window.map((s) => s.inFlight));
  const lags = window.slice(1).map((s) => s.lagP99Ms);
  const runsPerSec = finished / windowSec;
  return {
    maxInFlight,
    runsPerSec,
    ratioOfShare: runsPerSec / idealShare,
    medianInFlight,
    lagP99Ms: { median: median(lags), worst: Math.max(...lags) },
    idle: { rssBytes: idleRss, heapBytes: idleHeap },
    loaded: { rssBytes: loadedRss, heapBytes: loadedHeap },
    perRunBytes: { rss: bytesPerRun(idleRss, loadedRss, medianInFlight), heap: bytesPerRun(idleHeap, loadedHeap, medianInFlight) },
    cpuMsPerRun: finished > 0 ? ((last.cpuSec - first.cpuSec) * 1000) / finished : Number.NaN,
    meanMs: {
      execution: windowMeanMs(texts.first, texts.last, 'sluice_run_execution_seconds'),
      llmCall: windowMeanMs(texts.first, texts.last, 'sluice_step_call_seconds', 'dependency="anthropic"'),
      queueWait: windowMeanMs(texts.first, texts.last, 'sluice_run_queue_wait_seconds'),
    },
  };
}

export async function runInflight(opts: InflightBenchOptions): Promise<InflightResult> {
  const shares = splitInFlight(opts.inFlight, opts.processors);
  const runTimeMs = LLM_CALLS_PER_RUN * opts.latencyMs;
  const concurrent = Math.min(opts.inFlight, opts.llmCap);
  const otherCaps = opts.inFlight * 2;
  return withBenchHarness('inflight', async ({ infra, children, redis, dir, logger }) => {
    const simPort = await freePort();
    const simDoc = localConfig();
    simDoc.localInfra = false;
    simDoc.logLevel = 'warn';
    simDoc.simulator = { ...simDoc.simulator, host: '127.0.0.1', port: simPort, anthropicLatencyMs: opts.latencyMs, anthropicJitterMs: 0 };
    const sim = children.start('cli/main.js', ['start', '--config', writeYaml(dir, 'sim.yaml', simDoc), '--roles', 'provider-sim'], childEnv({}));
    const simulatorUrl = `http://127.0.0.1:${simPort}`;
    await Promise.race([waitForHttp(`${simulatorUrl}/healthz`, 30_000), children.exited(sim, 'provider simulator')]);
    await setLatencies(simulatorUrl, opts.latencyMs);

    const namespace = `bench-inflight-${Date.now().toString(36)}.`;
    const registryDir = join(dir, 'schema-registry');
    const env = { KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace };
    const docs = await Promise.all(
      shares.map(async (maxInFlight) => stackConfigDoc({ opsPort: await freePort(), registryDir, simulatorUrl, maxInFlight, llmCap: opts.llmCap, otherCaps })),
    );
    const paths = docs.map((doc, i) => writeYaml(dir, `processor-${i}.yaml`, doc));
    const config = parseConfig(docs[0]!, env, paths[0]!);
    const kafka = createKafka(config.kafka, logger, `bench-inflight-${process.pid}`);
    const admin = kafka.admin();
    await admin.connect();
    const codec = new EventCodec(new FileSchemaRegistry(registryDir));
    let producer: EventProducer | undefined;
    const procs: ChildProcess[] = [];
    try {
      await ensureTopics(admin, config.kafka, namespace);
      producer = await EventProducer.connect(kafka, codec, topicNames(namespace), { maxPending: opts.inFlight * 4 + 1_000 });
      for (const path of paths) procs.push(children.start('cli/main.js', ['start', '--config', path, '--roles', 'processor'], childEnv(env)));
      const died = Promise.race(procs.map((p, i) => children.exited(p, `processor ${i}`)));
      const urls = docs.map((d) => `http://127.0.0.1:${d.opsPort}/metrics`);
      await Promise.race([Promise.all(urls.map((u) => waitForHttp(u, 60_000))), died]);

      const scrapeAll = async () => {
        const texts = await Promise.all(urls.map((u) => scrape(u)));
        const at = Date.now();
        return texts.map((t, i) => {
          if (t === undefined) throw new Error(`processor ${i}'s metrics did not answer`);
          return { text: t, sample: sample(t, at) };
        });
      };
      const idle: Sample[][] = shares.map(() => []);
      for (let k = 0; k < 3; k++) {
        (await scrapeAll()).forEach((s, i) => idle[i]!.push(s.sample));
        await sleep(SAMPLE_MS);
      }

      await simAdmin(simulatorUrl, 'POST', '/stats/reset');
      const deadlineMs = FILL_TIMEOUT_MS + runTimeMs * 3 + opts.durationSec * 1000 + 600_000;
      let published = 0;
      // Keeps the runs topic a full in-flight total ahead of the processors: they never wait for work.
      const topUp = async (finished: number) => {
        const want = finished + opts.inFlight * 2 - published;
        if (want <= 0) return;
        const runs = Array.from({ length: want }, (_, k) => runRequest(published + k, deadlineMs));
        published += want;
        await Promise.race([Promise.all(runs.map((r) => producer!.publishRunRequested(r, 30_000))), died]);
      };
      await topUp(0);

      const tick = async () => {
        const s = await Promise.race([scrapeAll(), died]);
        await topUp(s.reduce((sum, x) => sum + x.sample.finished, 0));
        return s;
      };
      // Warm-up: every processor holds runs, then one whole run time passes so completions flow.
      await withTimeout(
        (async () => {
          for (;;) {
            const s = await tick();
            if (s.every((x) => x.sample.inFlight > 0)) return;
            await sleep(SAMPLE_MS);
          }
        })(),
        FILL_TIMEOUT_MS,
        'every processor holding runs',
      );
      const warmUntil = Date.now() + runTimeMs + 2_000;
      while (Date.now() < warmUntil) {
        await tick();
        await sleep(SAMPLE_MS);
      }

      const window: Sample[][] = shares.map(() => []);
      let firstTexts: string[] = [];
      let lastTexts: string[] = [];
      const windowEnd = Date.now() + opts.durationSec * 1000;
      for (;;) {
        const s = await tick();
        s.forEach((x, i) => window[i]!.push(x.sample));
        if (firstTexts.length === 0) firstTexts = s.map((x) => x.text);
        lastTexts = s.map((x) => x.text);
        if (Date.now() >= windowEnd) break;
        await sleep(SAMPLE_MS);
      }
      const stats = (await simAdmin(simulatorUrl, 'GET', '/stats')) as { maxConcurrent: { byTarget: Record<string, number> } };
      const llmPeakConcurrent = stats.maxConcurrent.byTarget.anthropic ?? 0;

      const totalFirst = window.reduce((sum, w) => sum + w[0]!.finished, 0);
      const totalLast = window.reduce((sum, w) => sum + w[w.length - 1]!.finished, 0);
      const windowSec = (window[0]![window[0]!.length - 1]!.at - window[0]![0]!.at) / 1000;
      const throughput = throughputFigure(totalLast - totalFirst, windowSec, concurrent, runTimeMs);
      return {
        options: opts,
        runTimeMs,
        windowSec,
        concurrent,
        throughput,
        processors: shares.map((share, i) => processorFigures(share, idle[i]!, window[i]!, (throughput.idealPerSec * share) / opts.inFlight, { first: firstTexts[i]!, last: lastTexts[i]! })),
        outcomes: windowByLabel(firstTexts, lastTexts, 'sluice_runs_finished_total', 'status'),
        retries: windowByLabel(firstTexts, lastTexts, 'sluice_run_retries_total', 'reason'),
        calls: windowByLabel(firstTexts, lastTexts, 'sluice_step_calls_total', 'outcome'),
        breakerTransitions: mostSeen(firstTexts.map((t, i) => windowByLabel([t], [lastTexts[i]!], 'sluice_breaker_transitions_total', 'to'))),
        llmPeakConcurrent,
        capsExact: llmPeakConcurrent <= opts.llmCap,
        published,
      };
    } finally {
      await Promise.all(procs.map((p) => children.stop(p, 10_000)));
      await producer?.close().catch(() => undefined);
      await admin.deleteTopics({ topics: Object.values(topicNames(namespace)), timeout: 10_000 }).catch(() => undefined);
      await admin.deleteGroups([groupId(namespace, 'processor')]).catch(() => undefined);
      await admin.disconnect().catch(() => undefined);
      await deleteKeys(redis, `${namespace}*`).catch(() => undefined);
    }
  });
}

const mib = (b: number) => (b / 2 ** 20).toFixed(1);
const kib = (b: number) => (b / 1024).toFixed(1);

export function inflightTable(r: InflightResult): string {
  const o = r.options;
  const t = r.throughput;
  const lines = [
    `inflight bench: ${o.processors} processor(s), ${o.inFlight} runs in flight in all (maxInFlight ${r.processors.map((p) => p.maxInFlight).join('+')}), LLM cap ${o.llmCap}, every LLM call ${o.latencyMs} ms, tools 0 ms`,
    `workflow ${BENCH_WORKFLOW}: ${LLM_CALLS_PER_RUN} LLM calls, run time ${r.runTimeMs} ms; window ${r.windowSec.toFixed(1)} s after a warm-up of one run time; ${r.published} runs published`,
    `ideal = min(in flight, LLM cap) / run time = ${r.concurrent} / ${(r.runTimeMs / 1000).toFixed(1)} s = ${t.idealPerSec.toFixed(2)} runs/s`,
    '',
    '| figure | value | target |',
    '|---|---|---|',
    `| runs/s achieved (all processors) | ${t.achievedPerSec.toFixed(2)} | |`,
    `| runs/s ideal | ${t.idealPerSec.toFixed(2)} | |`,
    `| ratio achieved / ideal | ${t.ratio.toFixed(3)} | >= ${RATIO_TARGET} ${t.ratio >= RATIO_TARGET ? 'met' : 'NOT met'} |`,
    `| LLM calls in flight at most (simulator) | ${r.llmPeakConcurrent} | <= cap ${o.llmCap}: ${r.capsExact ? 'exact' : 'EXCEEDED'} |`,
    `| outcomes in the window | ${Object.entries(r.outcomes).map(([s, n]) => `${s} ${n}`).join(', ')} | |`,
    `| dependency calls in the window, by outcome | ${Object.entries(r.calls).map(([s, n]) => `${s} ${n}`).join(', ')} | |`,
    `| breaker transitions in the window, by state entered | ${Object.entries(r.breakerTransitions).map(([s, n]) => `${s} ${n}`).join(', ') || 'none'} | |`,
    `| runs retried in the window, by reason | ${Object.entries(r.retries).map(([s, n]) => `${s} ${n}`).join(', ') || 'none'} | |`,
    '',
    '| processor | maxInFlight | median in flight | runs/s | of its share | event-loop p99 median / worst 1 s (ms) | RSS idle → loaded (MiB) | heap idle → loaded (MiB) | RSS per run (KiB) | heap per run (KiB) | CPU ms per run | mean ms: run execution / LLM call / wait for permits |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  r.processors.forEach((p, i) => {
    lines.push(
      `| ${i} | ${p.maxInFlight} | ${p.medianInFlight} | ${p.runsPerSec.toFixed(2)} | ${p.ratioOfShare.toFixed(3)} | ${p.lagP99Ms.median.toFixed(1)} / ${p.lagP99Ms.worst.toFixed(1)} ${p.lagP99Ms.worst <= LAG_TARGET_MS ? '(<= 50 met)' : '(> 50)'} | ${mib(p.idle.rssBytes)} → ${mib(p.loaded.rssBytes)} | ${mib(p.idle.heapBytes)} → ${mib(p.loaded.heapBytes)} | ${kib(p.perRunBytes.rss)} | ${kib(p.perRunBytes.heap)} | ${p.cpuMsPerRun.toFixed(2)} | ${p.meanMs.execution.toFixed(0)} / ${p.meanMs.llmCall.toFixed(0)} / ${p.meanMs.queueWait.toFixed(0)} |`,
    );
  });
  if (r.processors.length > 1) {
    const sum = r.processors.reduce((s, p) => s + p.runsPerSec, 0);
    lines.push('', `sum of the processors' runs/s ${sum.toFixed(2)} = ${(sum / t.idealPerSec).toFixed(3)} of the ideal ${t.idealPerSec.toFixed(2)}`);
  }
  return `${lines.join('\n')}\n`;
}

export async function benchInflight(opts: InflightBenchOptions): Promise<void> {
  const r = await runInflight(opts);
  process.stdout.write(opts.json ? `${JSON.stringify(r, null, 2)}\n` : inflightTable(r));
}
